"""Positional encodings as the decoder sees them: three hooks and a registry by name."""

from pejax.nn.positional.alibi import AlibiPE
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.positional.learned import LearnedPE
from pejax.nn.positional.nope import NoPE
from pejax.nn.positional.registry import build_pe
from pejax.nn.positional.registry import get_pe_class
from pejax.nn.positional.registry import pe_names
from pejax.nn.positional.registry import register_pe
from pejax.nn.positional.rope import RotaryPE
from pejax.nn.positional.sinusoidal import SinusoidalPE
from pejax.nn.positional.t5 import T5BiasPE

__all__ = [
    "AlibiPE",
    "LearnedPE",
    "NoPE",
    "PositionalEncoding",
    "RotaryPE",
    "SinusoidalPE",
    "T5BiasPE",
    "build_pe",
    "get_pe_class",
    "pe_names",
    "register_pe",
]

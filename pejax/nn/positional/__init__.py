"""Positional encodings as the decoder sees them: configs, hooks and a registry by name.

Every module of this package is one PE (config dataclass + hook class + ``@register_pe``); the
registry discovers them, so a new PE is one new file here.
"""

from pejax.nn.positional.alibi import AlibiConfig
from pejax.nn.positional.alibi import AlibiPE
from pejax.nn.positional.interface import PEConfig
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.positional.interface import register_pe
from pejax.nn.positional.learned import LearnedConfig
from pejax.nn.positional.learned import LearnedPE
from pejax.nn.positional.nope import NoPE
from pejax.nn.positional.nope import NoPEConfig
from pejax.nn.positional.registry import pe_name_of
from pejax.nn.positional.registry import build_pe
from pejax.nn.positional.registry import get_pe_class
from pejax.nn.positional.registry import pe_config
from pejax.nn.positional.registry import pe_names
from pejax.nn.positional.rope import RotaryConfig
from pejax.nn.positional.rope import RotaryPE
from pejax.nn.positional.sinusoidal import SinusoidalConfig
from pejax.nn.positional.sinusoidal import SinusoidalPE
from pejax.nn.positional.t5 import T5BiasPE
from pejax.nn.positional.t5 import T5Config

__all__ = [
    "AlibiConfig",
    "AlibiPE",
    "LearnedConfig",
    "LearnedPE",
    "NoPE",
    "NoPEConfig",
    "PEConfig",
    "PositionalEncoding",
    "RotaryConfig",
    "RotaryPE",
    "SinusoidalConfig",
    "SinusoidalPE",
    "T5BiasPE",
    "T5Config",
    "build_pe",
    "get_pe_class",
    "pe_config",
    "pe_name_of",
    "pe_names",
    "register_pe",
]

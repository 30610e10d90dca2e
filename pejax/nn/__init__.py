"""Flax NNX decoder and attention; positional encodings enter through their hooks.

``pejax.nn.attention`` is the attention package (``pejax.nn.attention.attention`` the function).
"""

from pejax.nn import attention  # The package: attention.attention, its kernels.
from pejax.nn.attention import choose_implementation
from pejax.nn.attention import attention_mask
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_block import DecoderBlock
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.generation import generate
from pejax.nn.generation import sample_logits
from pejax.nn.irope import irope_pattern
from pejax.nn.kv_cache import KVCache
from pejax.nn.kv_cache import init_kv_cache
from pejax.nn.mlp import Mlp
from pejax.nn.attention import pallas_attention
from pejax.nn.attention import pallas_can_serve
from pejax.nn.rms_norm import RMSNorm
from pejax.nn.positional import AlibiConfig
from pejax.nn.positional import AlibiPE
from pejax.nn.positional import LearnedConfig
from pejax.nn.positional import NoPEConfig
from pejax.nn.positional import PEConfig
from pejax.nn.positional import RotaryConfig
from pejax.nn.positional import SinusoidalConfig
from pejax.nn.positional import T5Config
from pejax.nn.positional import pe_config
from pejax.nn.positional import pe_name_of
from pejax.nn.positional import LearnedPE
from pejax.nn.positional import NoPE
from pejax.nn.positional import PositionalEncoding
from pejax.nn.positional import RotaryPE
from pejax.nn.positional import SinusoidalPE
from pejax.nn.positional import T5BiasPE
from pejax.nn.positional import build_pe
from pejax.nn.positional import get_pe_class
from pejax.nn.positional import pe_names
from pejax.nn.positional import register_pe
from pejax.nn.self_attention import SelfAttention
from pejax.nn.token_linear import TokenLinear

__all__ = [
    "AlibiConfig",
    "AlibiPE",
    "LearnedConfig",
    "NoPEConfig",
    "PEConfig",
    "RotaryConfig",
    "SinusoidalConfig",
    "T5Config",
    "pe_config",
    "pe_name_of",
    "Decoder",
    "DecoderBlock",
    "DecoderConfig",
    "KVCache",
    "LearnedPE",
    "Mlp",
    "NoPE",
    "PositionalEncoding",
    "RotaryPE",
    "SelfAttention",
    "SinusoidalPE",
    "T5BiasPE",
    "TokenLinear",
    "attention",
    "attention_mask",
    "build_pe",
    "choose_implementation",
    "generate",
    "get_pe_class",
    "init_kv_cache",
    "irope_pattern",
    "pallas_attention",
    "pallas_can_serve",
    "pe_names",
    "register_pe",
    "sample_logits",
]

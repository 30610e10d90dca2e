"""Pure positional-encoding transforms (tables, rotations, biases, frequency scalings).

Everything here is a pure function of arrays and keyword-only hyper-parameters, except the NNX
modules that own learnable tables (kept in their own files).
"""

from pejax.encodings.rope import apply_rope
from pejax.encodings.rope import permute_rope_weights
from pejax.encodings.rope import rope_angles
from pejax.encodings.rope import rope_inv_freq
from pejax.encodings.rope import rope_layout_permutation
from pejax.encodings.rope import RopeConfig
from pejax.encodings.rope import rotate_with_angles
from pejax.encodings.rope_hf import rope_config_from_hf
from pejax.encodings.rope_hf import rope_config_to_hf
from pejax.encodings.rope_scaling import DynamicNTKScaling
from pejax.encodings.rope_scaling import LinearScaling
from pejax.encodings.rope_scaling import Llama3Scaling
from pejax.encodings.rope_scaling import LongRoPEScaling
from pejax.encodings.rope_scaling import NTKScaling
from pejax.encodings.rope_scaling import YaRNScaling

__all__ = (
    "apply_rope",
    "DynamicNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRoPEScaling",
    "NTKScaling",
    "permute_rope_weights",
    "rope_angles",
    "rope_config_from_hf",
    "rope_config_to_hf",
    "rope_inv_freq",
    "rope_layout_permutation",
    "RopeConfig",
    "rotate_with_angles",
    "YaRNScaling",
)

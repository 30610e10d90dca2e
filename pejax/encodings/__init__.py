"""Pure positional-encoding transforms (tables, rotations, biases, frequency scalings).

Everything here is a pure function of arrays and keyword-only hyper-parameters, except the NNX
modules that own learnable tables (kept in their own files).
"""

from pejax.encodings.alibi import alibi_bias
from pejax.encodings.alibi import alibi_slopes
from pejax.encodings.learned_position import LearnedPositionEmbedding
from pejax.encodings.randomized import randomized_positions
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
from pejax.encodings.sinusoidal import sinusoidal_embedding
from pejax.encodings.sinusoidal import sinusoidal_table
from pejax.encodings.t5_bias import T5RelativeBias
from pejax.encodings.t5_buckets import t5_relative_position_bucket

__all__ = (
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "DynamicNTKScaling",
    "LearnedPositionEmbedding",
    "LinearScaling",
    "Llama3Scaling",
    "LongRoPEScaling",
    "NTKScaling",
    "permute_rope_weights",
    "randomized_positions",
    "rope_angles",
    "rope_config_from_hf",
    "rope_config_to_hf",
    "rope_inv_freq",
    "rope_layout_permutation",
    "RopeConfig",
    "rotate_with_angles",
    "sinusoidal_embedding",
    "sinusoidal_table",
    "t5_relative_position_bucket",
    "T5RelativeBias",
    "YaRNScaling",
)

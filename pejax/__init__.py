"""pejax: positional encodings for Transformers in JAX/Flax.

The curated public API; import from here, never from private modules.
"""

__version__ = "0.1.0"

from pejax.encodings import apply_rope
from pejax.encodings import DynamicNTKScaling
from pejax.encodings import LinearScaling
from pejax.encodings import Llama3Scaling
from pejax.encodings import LongRoPEScaling
from pejax.encodings import NTKScaling
from pejax.encodings import permute_rope_weights
from pejax.encodings import rope_angles
from pejax.encodings import rope_config_from_hf
from pejax.encodings import rope_config_to_hf
from pejax.encodings import rope_inv_freq
from pejax.encodings import rope_layout_permutation
from pejax.encodings import RopeConfig
from pejax.encodings import rotate_with_angles
from pejax.encodings import YaRNScaling

__all__ = (
    "__version__",
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

"""pejax: positional encodings for Transformers in JAX/Flax.

The curated public API: pure transforms (``pejax.encodings``), the NNX decoder (``pejax.nn``),
data, evaluation and training entry points. Import from here or from those subpackages.
"""

__version__ = "0.1.0"

from pejax.encodings import alibi_bias
from pejax.encodings import alibi_slopes
from pejax.encodings import apply_axial_rope
from pejax.encodings import axial_inv_freqs
from pejax.encodings import axial_rope_angles
from pejax.encodings import axial_split
from pejax.encodings import LaplacianPE
from pejax.encodings import connected_components
from pejax.encodings import dense_adjacency
from pejax.encodings import laplacian_pe
from pejax.encodings import laplacian_pe_from_edges
from pejax.encodings import normalized_laplacian
from pejax.encodings import random_sign_flip
from pejax.encodings import random_walk_pe
from pejax.encodings import random_walk_pe_from_edges
from pejax.encodings import LearnedPositionEmbedding
from pejax.encodings import apply_mrope
from pejax.encodings import mrope_angles
from pejax.encodings import mrope_position_ids
from pejax.encodings import grid_positions
from pejax.encodings import image_positions
from pejax.encodings import interpolation_scale
from pejax.encodings import resize_grid_table
from pejax.encodings import video_positions
from pejax.encodings import randomized_positions
from pejax.encodings import RopeConfig
from pejax.encodings import apply_rope
from pejax.encodings import permute_rope_weights
from pejax.encodings import rope_angles
from pejax.encodings import rope_inv_freq
from pejax.encodings import rope_layout_permutation
from pejax.encodings import rotate_with_angles
from pejax.encodings import rope_config_from_hf
from pejax.encodings import rope_config_to_hf
from pejax.encodings import RopeMixed
from pejax.encodings import rope_mixed_angles
from pejax.encodings import rope_mixed_init_freqs
from pejax.encodings import DynamicNTKScaling
from pejax.encodings import LinearScaling
from pejax.encodings import Llama3Scaling
from pejax.encodings import LongRoPEScaling
from pejax.encodings import NTKScaling
from pejax.encodings import YaRNScaling
from pejax.encodings import sinusoidal_embedding
from pejax.encodings import sinusoidal_table
from pejax.encodings import sinusoidal_2d_embedding
from pejax.encodings import sinusoidal_2d_table
from pejax.encodings import sinusoidal_nd_embedding
from pejax.encodings import T5RelativeBias
from pejax.encodings import t5_relative_position_bucket
from pejax.nn import Decoder
from pejax.nn import DecoderConfig
from pejax.nn import KVCache
from pejax.nn import PositionalEncoding
from pejax.nn import register_pe
from pejax.nn import pe_names
from pejax.nn import get_pe_class
from pejax.nn import build_pe
from pejax.data import load_corpus
from pejax.data import make_train_iterator
from pejax.data import nonoverlapping_windows
from pejax.data import sliding_windows
from pejax.eval import perplexity_at_lengths
from pejax.eval import passkey_accuracy
from pejax.train import train
from pejax.train import TrainResult
from pejax.train import NonFiniteLossError
from pejax.train import create_optimizer
from pejax.train import Checkpointer
from pejax.train import make_train_step
from pejax.train.experiment import train_and_evaluate
from pejax.experiment_config import get_default_config

__all__ = (
    "__version__",
    "alibi_bias",
    "alibi_slopes",
    "apply_axial_rope",
    "apply_mrope",
    "apply_rope",
    "axial_inv_freqs",
    "axial_rope_angles",
    "axial_split",
    "build_pe",
    "Checkpointer",
    "connected_components",
    "create_optimizer",
    "Decoder",
    "DecoderConfig",
    "dense_adjacency",
    "DynamicNTKScaling",
    "get_default_config",
    "get_pe_class",
    "grid_positions",
    "image_positions",
    "interpolation_scale",
    "KVCache",
    "laplacian_pe",
    "laplacian_pe_from_edges",
    "LaplacianPE",
    "LearnedPositionEmbedding",
    "LinearScaling",
    "Llama3Scaling",
    "load_corpus",
    "LongRoPEScaling",
    "make_train_iterator",
    "make_train_step",
    "mrope_angles",
    "mrope_position_ids",
    "NonFiniteLossError",
    "nonoverlapping_windows",
    "normalized_laplacian",
    "NTKScaling",
    "passkey_accuracy",
    "pe_names",
    "permute_rope_weights",
    "perplexity_at_lengths",
    "PositionalEncoding",
    "random_sign_flip",
    "random_walk_pe",
    "random_walk_pe_from_edges",
    "randomized_positions",
    "register_pe",
    "resize_grid_table",
    "rope_angles",
    "rope_config_from_hf",
    "rope_config_to_hf",
    "rope_inv_freq",
    "rope_layout_permutation",
    "rope_mixed_angles",
    "rope_mixed_init_freqs",
    "RopeConfig",
    "RopeMixed",
    "rotate_with_angles",
    "sinusoidal_2d_embedding",
    "sinusoidal_2d_table",
    "sinusoidal_embedding",
    "sinusoidal_nd_embedding",
    "sinusoidal_table",
    "sliding_windows",
    "t5_relative_position_bucket",
    "T5RelativeBias",
    "train",
    "train_and_evaluate",
    "TrainResult",
    "video_positions",
    "YaRNScaling",
)

"""Pure positional-encoding transforms (tables, rotations, biases, frequency scalings).

Everything here is a pure function of arrays and keyword-only hyper-parameters, except the NNX
modules that own learnable tables (kept in their own files). Those modules import Flax, so
they load on first use: ``import pejax.encodings`` needs only jax and numpy.
"""

from pejax.encodings.kernel_bias import KernelBias
from pejax.encodings.kernel_bias import TileBias
from pejax.encodings.alibi import alibi_kernel_bias
from pejax.encodings.t5_buckets import t5_kernel_bias
from pejax.encodings.kerple import kerple_kernel_bias
from pejax.encodings.sandwich import sandwich_kernel_bias
from pejax.encodings.fire import fire_kernel_bias
from pejax.encodings.alibi import alibi_bias
from pejax.encodings.alibi import alibi_slopes
from pejax.encodings.axial_rope import apply_axial_rope
from pejax.encodings.axial_rope import axial_inv_freqs
from pejax.encodings.axial_rope import axial_rope_angles
from pejax.encodings.axial_rope import axial_split
from pejax.encodings.graph_laplacian import LaplacianPE
from pejax.encodings.graph_laplacian import check_adjacency
from pejax.encodings.graph_laplacian import connected_components
from pejax.encodings.graph_laplacian import dense_adjacency
from pejax.encodings.graph_laplacian import laplacian_pe
from pejax.encodings.graph_laplacian import laplacian_pe_from_edges
from pejax.encodings.graph_laplacian import normalized_laplacian
from pejax.encodings.graph_laplacian import random_sign_flip
from pejax.encodings.graph_random_walk import random_walk_pe
from pejax.encodings.graph_random_walk import random_walk_pe_from_edges
from pejax.encodings.liere import apply_block_rotations
from pejax.encodings.liere import apply_liere
from pejax.encodings.liere import comrope_ap_generators
from pejax.encodings.liere import comrope_ld_generators
from pejax.encodings.liere import liere_generators
from pejax.encodings.liere import liere_rope_generators
from pejax.encodings.liere import liere_rotations
from pejax.encodings.liere import skew_symmetric
from pejax.encodings.mrope import apply_mrope
from pejax.encodings.mrope import mrope_angles
from pejax.encodings.mrope import mrope_position_ids
from pejax.encodings.position_grids import check_grid_positions
from pejax.encodings.position_grids import grid_positions
from pejax.encodings.position_grids import image_positions
from pejax.encodings.position_grids import interpolation_scale
from pejax.encodings.position_grids import resize_grid_table
from pejax.encodings.position_grids import video_positions
from pejax.encodings.randomized import randomized_positions
from pejax.encodings.rope import RopeConfig
from pejax.encodings.rope import apply_rope
from pejax.encodings.rope import permute_rope_weights
from pejax.encodings.rope import rope_angles
from pejax.encodings.rope import rope_cos_sin
from pejax.encodings.rope import rope_inv_freq
from pejax.encodings.rope import rope_layout_permutation
from pejax.encodings.rope import rotate_with_angles
from pejax.encodings.rope_hf import rope_config_from_hf
from pejax.encodings.rope_hf import rope_config_to_hf
from pejax.encodings.rope_hf import UnknownRopeKeyWarning
from pejax.encodings.rope_scaling import DynamicNTKScaling
from pejax.encodings.rope_scaling import LinearScaling
from pejax.encodings.rope_scaling import Llama3Scaling
from pejax.encodings.rope_scaling import LongRoPEScaling
from pejax.encodings.rope_scaling import NTKScaling
from pejax.encodings.rope_scaling import YaRNScaling
from pejax.encodings.sinusoidal import sinusoidal_embedding
from pejax.encodings.sinusoidal import sinusoidal_table
from pejax.encodings.sinusoidal_2d import sinusoidal_2d_embedding
from pejax.encodings.sinusoidal_2d import sinusoidal_2d_table
from pejax.encodings.sinusoidal_2d import sinusoidal_nd_embedding
from pejax.encodings.t5_buckets import t5_relative_position_bucket
from pejax.encodings.kerple import kerple_bias
from pejax.encodings.sandwich import sandwich_bias
from pejax.encodings.sandwich import sandwich_head_scales
from pejax.encodings.fire import fire_normalized_distance
from pejax.encodings.shaw import shaw_relative_index
from pejax.encodings.shaw import shaw_query_scores
from pejax.encodings.shaw import shaw_bias_from_scores
from pejax.encodings.shaw import shaw_key_bias
from pejax.encodings.query_scaling import llama4_query_scale
from pejax.encodings.query_scaling import logn_query_scale
from pejax.encodings.query_scaling import ssmax_query_scale
from pejax.encodings.xpos import apply_xpos
from pejax.encodings.xpos import xpos_scale
from pejax.encodings.xpos import xpos_zeta
from pejax.encodings.p_rope import p_rope_inv_freq
from pejax.encodings.p_rope import p_rope_mask
from pejax.encodings.p_rope import p_rope_num_kept
from pejax.encodings.pope import pope_transform
from pejax.encodings.pope import pope_inv_freq
from pejax.encodings.pope import clamp_phase_bias
from pejax.encodings.fox import fox_cumulative_log_forget
from pejax.encodings.fox import fox_bias
from pejax.encodings.fox import forgetting_bias
from pejax.encodings.cope import cope_positions
from pejax.encodings.cope import cope_bias
from pejax.encodings.per_row_alibi import per_row_alibi_bias
from pejax.encodings.path import path_logits
from pejax.encodings.path import path_logits_rows
from pejax.encodings.path_attention import path_attention
from pejax.encodings.stick_breaking import stick_breaking_attention
from pejax.encodings.stick_breaking import stick_breaking_log_weights
from pejax.lazy_exports import lazy_exports

# NNX modules (Flax): imported on first use.
_LAZY_EXPORTS = {
    "LearnedPositionEmbedding": "pejax.encodings.learned_position",
    "LieRERotation": "pejax.encodings.liere_rotation",
    "RopeMixed": "pejax.encodings.rope_mixed",
    "rope_mixed_angles": "pejax.encodings.rope_mixed",
    "rope_mixed_init_freqs": "pejax.encodings.rope_mixed",
    "T5RelativeBias": "pejax.encodings.t5_bias",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY_EXPORTS)

__all__ = (
    "KernelBias",
    "path_attention",
    "path_logits",
    "path_logits_rows",
    "per_row_alibi_bias",
    "stick_breaking_attention",
    "stick_breaking_log_weights",
    "TileBias",
    "alibi_kernel_bias",
    "t5_kernel_bias",
    "kerple_kernel_bias",
    "sandwich_kernel_bias",
    "fire_kernel_bias",
    "alibi_bias",
    "alibi_slopes",
    "apply_axial_rope",
    "apply_block_rotations",
    "apply_liere",
    "apply_mrope",
    "apply_rope",
    "apply_xpos",
    "axial_inv_freqs",
    "axial_rope_angles",
    "axial_split",
    "check_adjacency",
    "check_grid_positions",
    "clamp_phase_bias",
    "comrope_ap_generators",
    "comrope_ld_generators",
    "connected_components",
    "cope_bias",
    "cope_positions",
    "dense_adjacency",
    "DynamicNTKScaling",
    "fire_normalized_distance",
    "forgetting_bias",
    "fox_bias",
    "fox_cumulative_log_forget",
    "grid_positions",
    "image_positions",
    "interpolation_scale",
    "kerple_bias",
    "laplacian_pe",
    "laplacian_pe_from_edges",
    "LaplacianPE",
    "LearnedPositionEmbedding",
    "liere_generators",
    "liere_rope_generators",
    "liere_rotations",
    "LieRERotation",
    "LinearScaling",
    "Llama3Scaling",
    "llama4_query_scale",
    "logn_query_scale",
    "LongRoPEScaling",
    "mrope_angles",
    "mrope_position_ids",
    "normalized_laplacian",
    "NTKScaling",
    "p_rope_inv_freq",
    "p_rope_mask",
    "p_rope_num_kept",
    "permute_rope_weights",
    "pope_inv_freq",
    "pope_transform",
    "random_sign_flip",
    "random_walk_pe",
    "random_walk_pe_from_edges",
    "randomized_positions",
    "resize_grid_table",
    "rope_angles",
    "rope_cos_sin",
    "rope_config_from_hf",
    "rope_config_to_hf",
    "rope_inv_freq",
    "rope_layout_permutation",
    "rope_mixed_angles",
    "rope_mixed_init_freqs",
    "RopeConfig",
    "RopeMixed",
    "rotate_with_angles",
    "sandwich_bias",
    "sandwich_head_scales",
    "shaw_bias_from_scores",
    "shaw_key_bias",
    "shaw_query_scores",
    "shaw_relative_index",
    "skew_symmetric",
    "sinusoidal_2d_embedding",
    "sinusoidal_2d_table",
    "sinusoidal_embedding",
    "sinusoidal_nd_embedding",
    "sinusoidal_table",
    "ssmax_query_scale",
    "t5_relative_position_bucket",
    "T5RelativeBias",
    "UnknownRopeKeyWarning",
    "video_positions",
    "xpos_scale",
    "xpos_zeta",
    "YaRNScaling",
)

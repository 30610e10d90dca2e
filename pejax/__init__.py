"""pejax: positional encodings for Transformers in JAX/Flax.

The curated public API: pure transforms (``pejax.encodings``), the NNX decoder (``pejax.nn``),
data, evaluation and training entry points. Import from here or from those subpackages.

Names are imported on first use (``pejax.lazy_exports``): ``import pejax`` costs only this file,
and ``import pejax.encodings`` loads jax and numpy but not Flax, Optax, Orbax or ml_collections.
"""

from pejax.lazy_exports import lazy_exports

__version__ = "0.1.0"

# Public name -> the module it lives in, one per line. (The training loop is
# ``pejax.train.train``: a top-level ``train`` function would be shadowed by the subpackage.)
_EXPORTS = {
    "alibi_bias": "pejax.encodings",
    "alibi_slopes": "pejax.encodings",
    "apply_axial_rope": "pejax.encodings",
    "axial_inv_freqs": "pejax.encodings",
    "axial_rope_angles": "pejax.encodings",
    "axial_split": "pejax.encodings",
    "LaplacianPE": "pejax.encodings",
    "connected_components": "pejax.encodings",
    "dense_adjacency": "pejax.encodings",
    "laplacian_pe": "pejax.encodings",
    "laplacian_pe_from_edges": "pejax.encodings",
    "normalized_laplacian": "pejax.encodings",
    "random_sign_flip": "pejax.encodings",
    "random_walk_pe": "pejax.encodings",
    "random_walk_pe_from_edges": "pejax.encodings",
    "LearnedPositionEmbedding": "pejax.encodings",
    "apply_mrope": "pejax.encodings",
    "mrope_angles": "pejax.encodings",
    "mrope_position_ids": "pejax.encodings",
    "grid_positions": "pejax.encodings",
    "image_positions": "pejax.encodings",
    "interpolation_scale": "pejax.encodings",
    "resize_grid_table": "pejax.encodings",
    "video_positions": "pejax.encodings",
    "randomized_positions": "pejax.encodings",
    "RopeConfig": "pejax.encodings",
    "apply_rope": "pejax.encodings",
    "permute_rope_weights": "pejax.encodings",
    "rope_angles": "pejax.encodings",
    "rope_inv_freq": "pejax.encodings",
    "rope_layout_permutation": "pejax.encodings",
    "rotate_with_angles": "pejax.encodings",
    "rope_config_from_hf": "pejax.encodings",
    "rope_config_to_hf": "pejax.encodings",
    "RopeMixed": "pejax.encodings",
    "rope_mixed_angles": "pejax.encodings",
    "rope_mixed_init_freqs": "pejax.encodings",
    "DynamicNTKScaling": "pejax.encodings",
    "LinearScaling": "pejax.encodings",
    "Llama3Scaling": "pejax.encodings",
    "LongRoPEScaling": "pejax.encodings",
    "NTKScaling": "pejax.encodings",
    "YaRNScaling": "pejax.encodings",
    "sinusoidal_embedding": "pejax.encodings",
    "sinusoidal_table": "pejax.encodings",
    "sinusoidal_2d_embedding": "pejax.encodings",
    "sinusoidal_2d_table": "pejax.encodings",
    "sinusoidal_nd_embedding": "pejax.encodings",
    "T5RelativeBias": "pejax.encodings",
    "t5_relative_position_bucket": "pejax.encodings",
    "Decoder": "pejax.nn",
    "DecoderConfig": "pejax.nn",
    "KVCache": "pejax.nn",
    "PositionalEncoding": "pejax.nn",
    "register_pe": "pejax.nn",
    "pe_config": "pejax.nn",
    "PEConfig": "pejax.nn",
    "RotaryConfig": "pejax.nn",
    "pe_names": "pejax.nn",
    "get_pe_class": "pejax.nn",
    "build_pe": "pejax.nn",
    "load_corpus": "pejax.data",
    "make_train_iterator": "pejax.data",
    "nonoverlapping_windows": "pejax.data",
    "sliding_windows": "pejax.data",
    "perplexity_at_lengths": "pejax.eval",
    "passkey_accuracy": "pejax.eval",
    "TrainResult": "pejax.train",
    "NonFiniteLossError": "pejax.train",
    "create_optimizer": "pejax.train",
    "Checkpointer": "pejax.train",
    "make_train_step": "pejax.train",
    "train_and_evaluate": "pejax.train.experiment",
    "get_default_config": "pejax.experiment_config",
}

__getattr__, __dir__ = lazy_exports(
    __name__, _EXPORTS,
    submodules=("data", "encodings", "eval", "experiment_config", "nn", "parallel", "train"))

__all__ = ("__version__", *_EXPORTS)

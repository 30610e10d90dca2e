"""Hugging Face checkpoints and tokenizers in and out (local files only, no network).

* :func:`from_pretrained`: a local HF decoder directory (llama, mistral, qwen2, qwen3, phi3,
  gemma) -> :class:`pejax.nn.Decoder` whose logits equal transformers'.
* :func:`save_pretrained`: a decoder -> ``config.json`` + ``model.safetensors`` that
  transformers loads to the same logits (a model loaded from a checkpoint is written back as
  its own family, with the keys pejax does not interpret).
* :func:`load_tokenizer`: the directory's ``tokenizer.json`` through the ``tokenizers`` package;
  :class:`ByteTokenizer`: pejax's byte-level ids, and their ``tokenizer.json``.
* ``python -m pejax.hf.export RUN OUT``: a trained run -> a checkpoint directory with its
  tokenizer (:mod:`pejax.hf.export`, not imported here: it sits above the training code).
* :func:`with_rope_scaling`: the same weights with a context-extension RoPE scaling.
* :func:`kv_cache_memory`: bytes of a decoder's KV cache at a context length (from a
  ``config.json`` dict or a :class:`~pejax.nn.DecoderConfig`).
"""

from pejax.hf.checkpoint_loading import from_pretrained
from pejax.hf.checkpoint_loading import load_config
from pejax.hf.checkpoint_loading import with_rope_scaling
from pejax.hf.checkpoint_saving import save_pretrained
from pejax.hf.config_mapping import SUPPORTED_MODEL_TYPES
from pejax.hf.config_mapping import decoder_config_from_hf
from pejax.hf.config_mapping import decoder_config_to_hf
from pejax.hf.kv_cache_memory import kv_cache_memory
from pejax.hf.tokenizer import ByteTokenizer
from pejax.hf.tokenizer import Tokenizer
from pejax.hf.tokenizer import load_tokenizer

__all__ = (
    "ByteTokenizer",
    "SUPPORTED_MODEL_TYPES",
    "Tokenizer",
    "decoder_config_from_hf",
    "decoder_config_to_hf",
    "from_pretrained",
    "kv_cache_memory",
    "load_config",
    "load_tokenizer",
    "save_pretrained",
    "with_rope_scaling",
)

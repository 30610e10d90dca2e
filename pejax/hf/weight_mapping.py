"""Which Hugging Face tensor each :class:`~pejax.nn.Decoder` parameter comes from, and how.

Axes: V vocabulary, E model width, H query heads, K key/value heads, D head dim, F MLP width.

PyTorch ``nn.Linear`` stores ``weight`` as ``[out, in]``; pejax's kernels are ``[in, out]``
(``x @ kernel``), so linear weights are transposed. Phi-3 fuses the query / key / value
projections into ``qkv_proj`` (rows ``[H*D | K*D | K*D]``) and the gate / up projections into
``gate_up_proj`` (rows ``[F gate | F up]``): each pejax kernel is a block of rows. The token
embedding ``[V, E]`` and the norm weights ``[E]`` are copied as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pejax.nn.decoder_config import DecoderConfig


@dataclasses.dataclass(frozen=True)
class WeightEntry:
  """One pejax parameter and its source.

  Attributes:
    path: the parameter's path in ``nnx.state(model)``, e.g. ``("blocks", 0, "attention",
      "query", "kernel")``.
    name: the Hugging Face tensor name, e.g. ``"model.layers.0.self_attn.q_proj.weight"``.
    transpose: whether the pejax value is the transpose of the (row block of the) tensor.
    rows: ``(start, stop)`` row block of a fused tensor, or ``None`` for the whole tensor.
    hf_shape: the shape of the whole Hugging Face tensor.
  """

  path: tuple
  name: str
  transpose: bool
  rows: Optional[tuple[int, int]]
  hf_shape: tuple[int, ...]


def weight_entries(config: DecoderConfig, model_type: str) -> list[WeightEntry]:
  """Every parameter of a decoder with ``config``, as a Hugging Face ``model_type`` names it.

  Args:
    config: the decoder config (from :func:`pejax.hf.decoder_config_from_hf`).
    model_type: the family (``"phi3"`` has fused projections; the others separate ones).

  Returns:
    One :class:`WeightEntry` per parameter, in checkpoint order (embedding, layers, final norm,
    output head when untied).
  """
  width, heads, kv_heads = config.d_model, config.num_heads, config.kv_heads
  head_dim, hidden, vocab = config.head_dim, config.mlp_hidden, config.vocab_size
  q_size, kv_size = heads * head_dim, kv_heads * head_dim
  entries = [WeightEntry(("embed", "embedding"), "model.embed_tokens.weight", False, None,
                         (vocab, width))]

  def linear(path, name, out_features, in_features, rows=None, fused_rows=None):
    shape = (fused_rows or out_features, in_features)
    entries.append(WeightEntry(path + ("kernel",), name, True, rows, shape))

  for i in range(config.num_layers):
    layer, attn = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
    block = ("blocks", i)
    entries.append(WeightEntry(block + ("attention_norm", "scale"),
                               layer + "input_layernorm.weight", False, None, (width,)))
    if model_type == "phi3":
      fused = q_size + 2 * kv_size
      for key, start, size in (("query", 0, q_size), ("key", q_size, kv_size),
                               ("value", q_size + kv_size, kv_size)):
        linear(block + ("attention", key), attn + "qkv_proj.weight", size, width,
               rows=(start, start + size), fused_rows=fused)
    else:
      for key, hf, size in (("query", "q_proj", q_size), ("key", "k_proj", kv_size),
                            ("value", "v_proj", kv_size)):
        linear(block + ("attention", key), attn + f"{hf}.weight", size, width)
        if config.qkv_bias:
          entries.append(WeightEntry(block + ("attention", key, "bias"), attn + f"{hf}.bias",
                                     False, None, (size,)))
    linear(block + ("attention", "output"), attn + "o_proj.weight", width, q_size)
    if config.output_bias:
      entries.append(WeightEntry(block + ("attention", "output", "bias"), attn + "o_proj.bias",
                                 False, None, (width,)))
    if config.layer_qk_norms[i] is True:  # A learned scale ("l2", Llama 4's, has none).
      for key, hf in (("query_norm", "q_norm"), ("key_norm", "k_norm")):
        entries.append(WeightEntry(block + ("attention", key, "scale"), attn + f"{hf}.weight",
                                   False, None, (head_dim,)))
    entries.append(WeightEntry(block + ("mlp_norm", "scale"),
                               layer + "post_attention_layernorm.weight", False, None, (width,)))
    mlp = layer + "mlp."
    if model_type == "phi3":
      linear(block + ("mlp", "gate"), mlp + "gate_up_proj.weight", hidden, width,
             rows=(0, hidden), fused_rows=2 * hidden)
      linear(block + ("mlp", "up"), mlp + "gate_up_proj.weight", hidden, width,
             rows=(hidden, 2 * hidden), fused_rows=2 * hidden)
    else:
      linear(block + ("mlp", "gate"), mlp + "gate_proj.weight", hidden, width)
      linear(block + ("mlp", "up"), mlp + "up_proj.weight", hidden, width)
    linear(block + ("mlp", "down"), mlp + "down_proj.weight", width, hidden)
  entries.append(WeightEntry(("final_norm", "scale"), "model.norm.weight", False, None, (width,)))
  if not config.tie_embeddings:
    linear(("lm_head",), "lm_head.weight", vocab, width)
  return entries

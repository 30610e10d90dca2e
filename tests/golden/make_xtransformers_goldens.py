"""Regenerates ``tests/encodings/xtransformers_goldens.json`` from ``x-transformers``.

Not run by the test suite (pejax never depends on torch or x-transformers). To reproduce::

    python -m venv /tmp/xref
    /tmp/xref/bin/pip install torch x-transformers      # a CPU wheel of torch is enough
    /tmp/xref/bin/python tests/golden/make_xtransformers_goldens.py \
        > tests/encodings/xtransformers_goldens.json

Generated with x-transformers 2.31.10 and torch 2.13.0 (CPU, float32). Each case stores its
random inputs (so the test does not need torch's generator) and the outputs of x-transformers'
own classes and functions:

* ``xpos``: ``RotaryEmbedding(use_xpos=True)`` + ``apply_rotary_pos_emb`` on queries (scale) and
  keys (scale ** -1), as ``Attention.forward`` calls them; interleaved channel pairs, exponent
  centered at ``max_position // 2``.
* ``pope``: ``PolarEmbedding`` + ``apply_polar_pos_emb`` (queries with the frequencies, keys with
  the frequencies plus the clamped learned bias).
* ``cope``: ``CoPE.forward(q, sim)`` with ``sim`` the scaled, causally masked logits, as
  ``Attend.forward`` builds them.
* ``data_dependent_alibi``: ``DataDependentAlibi(causal=True)`` on token features ``x``.
* ``per_row_data_dependent_alibi``: ``PerRowDataDependentAlibi(causal=True)`` on token features
  ``x`` (its weight ``[2 * H * d, E]``: gate queries then gate keys, head-major).
"""

import json
import math
import sys

import torch
import x_transformers
from x_transformers import x_transformers as xt
import golden_io  # This directory's shared helpers (the scripts run from here).

torch.manual_seed(0)


_list = golden_io.float32_lists


def xpos_case(*, heads, length, head_dim, rotary_dim, scale_base):
  rotary = xt.RotaryEmbedding(rotary_dim, use_xpos=True, scale_base=scale_base)
  q = torch.randn(1, heads, length, head_dim)
  k = torch.randn(1, heads, length, head_dim)
  positions = torch.arange(length)
  freqs, scale = rotary(positions)
  q_out = xt.apply_rotary_pos_emb(q, freqs, scale)
  k_out = xt.apply_rotary_pos_emb(k, freqs, scale ** -1.0)
  return dict(head_dim=head_dim, rotary_dim=rotary_dim, scale_base=scale_base,
              center=int(length // 2), q=_list(q), k=_list(k), q_out=_list(q_out),
              k_out=_list(k_out), scale=_list(scale[0, :, 0::2]))


def pope_case(*, heads, length, head_dim):
  polar = xt.PolarEmbedding(head_dim, heads)
  with torch.no_grad():
    # bias_uniform_init=True fails in 2.31.10 (in-place uniform_ on a leaf that requires grad):
    # the same initialization here, plus entries outside [-2 pi, 0] to exercise the clamp.
    polar.learned_bias.uniform_(-2.0 * math.pi, 0.0)
    polar.learned_bias[0, 0, 0] = 1.5
    polar.learned_bias[-1, 0, -1] = -9.0
  q = torch.randn(1, heads, length, head_dim)
  k = torch.randn(1, heads, length, head_dim)
  freqs, bias = polar(torch.arange(length))
  q_out = xt.apply_polar_pos_emb(q, freqs)
  k_out = xt.apply_polar_pos_emb(k, freqs + bias)
  scores = torch.einsum("bhid,bhjd->bhij", q_out, k_out)
  return dict(head_dim=head_dim, learned_bias=_list(polar.learned_bias[:, 0, :]), q=_list(q),
              k=_list(k), q_out=_list(q_out), k_out=_list(k_out), scores=_list(scores))


def cope_case(*, heads, length, head_dim, max_pos, q_scale):
  cope = xt.CoPE(head_dim, heads, max_pos)
  with torch.no_grad():
    cope.pos_emb.normal_()
  q = torch.randn(1, heads, length, head_dim) * q_scale
  k = torch.randn(1, heads, length, head_dim)
  sim = torch.einsum("bhid,bhjd->bhij", q, k) * head_dim ** -0.5
  causal = torch.ones(length, length, dtype=torch.bool).triu(1)
  sim = sim.masked_fill(causal, -torch.finfo(sim.dtype).max)
  out = cope(q, sim)
  return dict(max_pos=max_pos, pos_emb=_list(cope.pos_emb), q=_list(q), k=_list(k),
              bias=_list(out))


def dd_alibi_case(*, heads, length, dim, randomize_bias):
  alibi = xt.DataDependentAlibi(dim, heads, causal=True)
  linear = alibi.to_forget_gates[0]
  with torch.no_grad():
    linear.weight.normal_()
    if randomize_bias:
      linear.bias.normal_()
  x = torch.randn(2, length, dim)
  out = alibi(x)
  return dict(weight=_list(linear.weight), bias_param=_list(linear.bias), x=_list(x),
              bias=_list(out))


def per_row_dd_alibi_case(*, heads, length, dim, dim_head, post_log_scale, weight_std):
  alibi = xt.PerRowDataDependentAlibi(dim, heads, causal=True, dim_head=dim_head,
                                      post_log_scale=post_log_scale)
  linear = alibi.to_forget_gates[0]
  with torch.no_grad():
    linear.weight.normal_(std=weight_std)
  x = torch.randn(2, length, dim)
  out = alibi(x)
  return dict(dim_head=dim_head, post_log_scale=post_log_scale, weight=_list(linear.weight),
              x=_list(x), bias=_list(out))


def main():
  out = dict(
      versions=dict(x_transformers=getattr(x_transformers, "__version__", "2.31.10"),
                    torch=torch.__version__.split("+")[0]),
      xpos=dict(
          full_base512=xpos_case(heads=2, length=9, head_dim=8, rotary_dim=8, scale_base=512),
          partial_base4=xpos_case(heads=1, length=9, head_dim=12, rotary_dim=8, scale_base=4),
      ),
      pope=dict(h2_d6=pope_case(heads=2, length=7, head_dim=6)),
      cope=dict(
          clamped_p3=cope_case(heads=2, length=8, head_dim=4, max_pos=3, q_scale=1.0),
          wide_p16=cope_case(heads=1, length=8, head_dim=4, max_pos=16, q_scale=3.0),
      ),
      data_dependent_alibi=dict(
          default_bias_init=dd_alibi_case(heads=2, length=6, dim=5, randomize_bias=False),
          random_bias=dd_alibi_case(heads=3, length=6, dim=5, randomize_bias=True),
      ),
      per_row_data_dependent_alibi=dict(
          default_d8=per_row_dd_alibi_case(heads=2, length=7, dim=6, dim_head=8,
                                           post_log_scale=1.0, weight_std=1.0),
          d3_scaled=per_row_dd_alibi_case(heads=3, length=6, dim=5, dim_head=3,
                                          post_log_scale=0.5, weight_std=2.0),
      ),
  )
  json.dump(out, sys.stdout, separators=(",", ":"))
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()

"""Regenerates ``tests/encodings/path_goldens.json`` from PaTH's reference PyTorch implementation.

Not run by the test suite (pejax never depends on torch). The reference is
``fla/ops/path_attn/naive.py`` (``naive_path_attn``) of fla-org/flash-linear-attention, commit
bc3b101dcb713ddc5bd8924b66754eb68b5ccf89 (2026-08-22); it needs only torch and einops, so this
script loads that one file instead of importing ``fla`` (whose package import needs Triton).
To reproduce::

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch einops   # a CPU torch is enough
    git clone https://github.com/fla-org/flash-linear-attention /tmp/fla
    git -C /tmp/fla checkout bc3b101dcb713ddc5bd8924b66754eb68b5ccf89
    /tmp/ref/bin/python tests/golden/make_path_goldens.py /tmp/fla/fla/ops/path_attn/naive.py \\
        > tests/encodings/path_goldens.json

Generated with torch 2.13.0 (CPU, float32). Each case stores its random inputs (q, k, v, w unit
vectors, beta in (0, 2)), the attention output of ``naive_path_attn`` with no forget gate
(``g = 0``) and ``scale = D ** -0.5``, and the gradients of ``sum(output * cotangent)`` with
respect to q, k, w and beta for a stored random cotangent.
"""

import json
import sys

import torch
import torch.nn.functional as F
import golden_io  # This directory's shared helpers (the scripts run from here).

torch.manual_seed(0)


_list = golden_io.float32_lists


def case(naive, *, batch, length, heads, kv_heads, head_dim, chunk_size, beta_low):
  q = torch.randn(batch, length, heads, head_dim, requires_grad=True)
  k = torch.randn(batch, length, kv_heads, head_dim, requires_grad=True)
  v = torch.randn(batch, length, kv_heads, head_dim)
  w = F.normalize(torch.randn(batch, length, kv_heads, head_dim), dim=-1).requires_grad_(True)
  beta = torch.empty(batch, length, kv_heads).uniform_(beta_low, 2.0).requires_grad_(True)
  g = torch.zeros(batch, length, heads)
  out = naive(q, k, v, w, beta, g, head_dim ** -0.5, chunk_size=chunk_size)
  cotangent = torch.randn_like(out)
  (out * cotangent).sum().backward()
  return dict(chunk_size=chunk_size, q=_list(q), k=_list(k), v=_list(v), w=_list(w),
              beta=_list(beta), out=_list(out), cotangent=_list(cotangent), dq=_list(q.grad),
              dk=_list(k.grad), dw=_list(w.grad), dbeta=_list(beta.grad))


def main():
  naive = golden_io.load_function(sys.argv[1], "fla_path_naive", "naive_path_attn")
  out = dict(
      versions=dict(torch=torch.__version__.split("+")[0],
                    fla_commit="bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"),
      cases=dict(
          # One chunk of 8 holds the whole sequence (the intra-chunk UT form only).
          one_chunk=case(naive, batch=1, length=7, heads=2, kv_heads=2, head_dim=4,
                         chunk_size=8, beta_low=0.0),
          # Several chunks, a padded last chunk, GQA (4 query heads on 2 key/value heads) and
          # strengths near 2 (near reflections), as fla's own tests draw them.
          chunks_gqa=case(naive, batch=2, length=13, heads=4, kv_heads=2, head_dim=8,
                          chunk_size=4, beta_low=1.5),
      ),
  )
  json.dump(out, sys.stdout, separators=(",", ":"))
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()

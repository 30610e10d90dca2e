"""Regenerates ``tests/encodings/stick_breaking_goldens.json`` from the reference implementation.

Not run by the test suite (pejax never depends on torch). The reference is
``stickbreaking_attention/sb_ref.py`` (``stickbreaking``) of shawntan/stickbreaking-attention,
commit 3147a3841b025a31d271fc8f873120ff6fa0461b (2025-03-14), called as that repository's own
tests call it (``tests/test_attn.py``, ``ref_fwd``): a causal mask without (or with,
``attend_current``) the diagonal, ``cum_weight = tril(ones, -1)``, and the remainder added to the
query's own value, ``o + rem[..., None] * v``. The file needs only torch, so it is loaded alone.
To reproduce::

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch     # a CPU torch is enough
    git clone https://github.com/shawntan/stickbreaking-attention /tmp/sb
    git -C /tmp/sb checkout 3147a3841b025a31d271fc8f873120ff6fa0461b
    /tmp/ref/bin/python tests/golden/make_stick_breaking_goldens.py \\
        /tmp/sb/stickbreaking_attention/sb_ref.py > tests/encodings/stick_breaking_goldens.json

Generated with torch 2.13.0 (CPU, float32). Each case stores q, k, v ``[B, H, L, D]`` (the
reference's layout), the output with the remainder on the own value, the remainder itself, and
the gradients of ``sum(output * cotangent)`` with respect to q, k and v.
"""

import json
import sys

import torch
import golden_io  # This directory's shared helpers (the scripts run from here).

torch.manual_seed(0)


_list = golden_io.float32_lists


def case(stickbreaking, *, batch, heads, length, dim, attend_current, shift):
  # As the reference's tests: queries and keys shifted apart, so sigmoids are not all near 1/2.
  q = (0.5 * (torch.randn(batch, heads, length, dim) + shift)).requires_grad_(True)
  k = (0.5 * (torch.randn(batch, heads, length, dim) - shift)).requires_grad_(True)
  v = torch.randn(batch, heads, length, dim).requires_grad_(True)
  mask = torch.ones(length, length).triu(1 if attend_current else 0).bool()
  cum_weight = torch.ones(length, length).tril(-1)
  o, rem = stickbreaking(q, k, v, mask, cum_weight)
  out = o + rem[..., None] * v
  cotangent = torch.randn_like(out)
  (out * cotangent).sum().backward()
  return dict(attend_current=attend_current, q=_list(q), k=_list(k), v=_list(v), out=_list(out),
              rem=_list(rem), cotangent=_list(cotangent), dq=_list(q.grad), dk=_list(k.grad),
              dv=_list(v.grad))


def main():
  stickbreaking = golden_io.load_function(sys.argv[1], "sb_ref", "stickbreaking")
  out = dict(
      versions=dict(torch=torch.__version__.split("+")[0],
                    stickbreaking_attention_commit="3147a3841b025a31d271fc8f873120ff6fa0461b"),
      cases=dict(
          strict=case(stickbreaking, batch=2, heads=2, length=9, dim=4, attend_current=False,
                      shift=1.0),
          attend_current=case(stickbreaking, batch=1, heads=3, length=7, dim=8,
                              attend_current=True, shift=-1.0),
      ),
  )
  json.dump(out, sys.stdout, separators=(",", ":"))
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()

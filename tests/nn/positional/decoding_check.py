"""Decoding equals the full forward pass: the check every PE with its own attention runs.

Not a test file: ``from tests.nn.positional.decoding_check import assert_decoding_matches``.
"""

import jax
import jax.numpy as jnp
from flax import nnx
import numpy as np


def assert_decoding_matches(model, tokens: jax.Array, *, eviction: str, prefill: int = 4,
                            tolerance: float = 2e-5) -> None:
  """Prefill ``tokens[:, :prefill]``, decode the rest one token at a time; each step's logits
  equal the full forward's at that position.

  The cache is 16 slots, as long as or longer than ``tokens``: a window cache never evicts here,
  so its chronological view must give the same numbers as the linear cache.
  """
  batch, length = tokens.shape
  full = nnx.jit(lambda m, t: m(t))(model, tokens)
  cache = model.init_cache(batch, 16, eviction=eviction)
  logits, cache = nnx.jit(lambda m, t, c: m.prefill(t, None, c))(model, tokens[:, :prefill], cache)
  np.testing.assert_allclose(logits, full[:, :prefill], rtol=tolerance, atol=tolerance)
  step = nnx.jit(lambda m, t, p, c: m.decode_step(t, p, c))
  for i in range(prefill, length):
    logits, cache = step(model, tokens[:, i:i + 1], jnp.full((batch, 1), i, jnp.int32), cache)
    np.testing.assert_allclose(logits[:, 0], full[:, i], rtol=tolerance, atol=tolerance,
                               err_msg=f"token {i}")

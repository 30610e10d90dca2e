"""pejax.encodings.kernel_bias: the description of a bias a fused kernel computes per tile.

Each built-in tile function equals its PE's dense ``bias`` hook in
``tests/nn/attention/test_pallas.py`` (``test_tile_function_equals_pe_bias_hook``); here: the
description's own contract (options as keyword arguments, hashable and static under jit, a
pytree whose only leaf is the parameter array) and its failure modes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import alibi_bias, alibi_kernel_bias, alibi_slopes
from pejax.encodings.kernel_bias import KernelBias, TileBias


def _scaled_distance(params, q_pos, k_pos, *, power):
  return params[0] * jnp.abs(q_pos - k_pos) ** power


def test_options_reach_the_function_as_keywords():
  tile = TileBias(_scaled_distance, 1, options=(("power", 2),))
  got = tile((jnp.float32(3.0),), jnp.arange(3.0)[:, None], jnp.arange(4.0)[None, :])
  want = 3.0 * np.abs(np.arange(3.0)[:, None] - np.arange(4.0)[None, :]) ** 2
  np.testing.assert_allclose(got, want)
  assert tile.option("power") == 2 and tile.name == "_scaled_distance"


def test_equal_descriptions_share_a_trace_and_params_are_the_only_leaf():
  traces = []

  @jax.jit
  def total(bias: KernelBias):
    traces.append(bias.tile)
    return jnp.sum(bias.params)

  total(alibi_kernel_bias(4))
  total(KernelBias(alibi_kernel_bias(4).tile, jnp.ones((4, 1))))  # Same tile: no new trace.
  assert len(traces) == 1
  assert len(jax.tree.leaves(alibi_kernel_bias(4))) == 1


def test_alibi_tile_equals_alibi_bias():
  positions = jnp.asarray([0, 3, 4, 9, 20], jnp.int32)
  spec = alibi_kernel_bias(3, causal=False)
  want = alibi_bias(positions[None], positions[None], alibi_slopes(3), causal=False)[0]
  qf, kf = positions.astype(jnp.float32)[:, None], positions.astype(jnp.float32)[None, :]
  for head in range(3):
    np.testing.assert_allclose(spec.tile((spec.params[head, 0],), qf, kf), want[head])


@pytest.mark.parametrize("kwargs, match", [
    (dict(function=None, num_params=1), "function must be callable"),
    (dict(function=_scaled_distance, num_params=0), "num_params"),
    (dict(function=_scaled_distance, num_params=1, options=(("power", [2]),)), "hashable"),
    (dict(function=_scaled_distance, num_params=1, options=("power", 2)), "options must be"),
    (dict(function=_scaled_distance, num_params=1, options={"power": 2}), "options must be"),
])
def test_bad_descriptions_raise_naming_the_field(kwargs, match):
  with pytest.raises(ValueError, match=match):
    TileBias(**kwargs)

"""Tests for pejax.encodings.fox: x-transformers DataDependentAlibi goldens, the sum of log gates,
tiles and cache continuation, failures."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.fox import forgetting_bias
from pejax.encodings.fox import fox_bias
from pejax.encodings.fox import fox_cumulative_log_forget

_GOLDENS = json.loads((pathlib.Path(__file__).parent / "xtransformers_goldens.json").read_text())[
    "data_dependent_alibi"]


def _log_sigmoid(x):
  return -np.logaddexp(0.0, -x)


class FoxGoldenTest(chex.TestCase):
  """Pinned to x-transformers' DataDependentAlibi (causal), the forget-gate bias of FoX."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_matches_x_transformers(self, name):
    case = _GOLDENS[name]
    x = np.asarray(case["x"], np.float32)
    weight = np.asarray(case["weight"], np.float32)  # [H, E] (torch Linear)
    gate_logits = x @ weight.T + np.asarray(case["bias_param"], np.float32)  # [B, L, H]
    got = self.variant(forgetting_bias)(gate_logits)
    expected = np.asarray(case["bias"], np.float32)
    chex.assert_shape(got, expected.shape)
    chex.assert_trees_all_close(got, expected, rtol=1e-6, atol=1e-6)

  def test_small_golden(self):
    # Gates sigmoid(0) = 1/2 then sigmoid(log 3) = 3/4: D[1, 0] = log 3/4, D[2, 0] = log 3/8.
    logits = np.array([[[0.0], [np.log(3.0)], [0.0]]], np.float32)  # [B=1, L=3, H=1]
    got = np.asarray(forgetting_bias(logits))[0, 0]
    np.testing.assert_allclose(np.tril(got), [[0.0, 0.0, 0.0],
                                              [np.log(0.75), 0.0, 0.0],
                                              [np.log(0.375), np.log(0.5), 0.0]], rtol=1e-6,
                               atol=1e-7)


class FoxPropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    self.logits = 2.0 * jax.random.normal(jax.random.PRNGKey(0), (2, 9, 3))

  def test_bias_is_sum_of_log_gates_after_the_key(self):
    got = np.asarray(forgetting_bias(self.logits))
    log_f = _log_sigmoid(np.asarray(self.logits, np.float64))
    for i in range(9):
      for j in range(i + 1):
        np.testing.assert_allclose(got[:, :, i, j], log_f[:, j + 1:i + 1, :].sum(axis=1),
                                   rtol=1e-5, atol=1e-5)

  def test_causal_part_is_nonpositive_and_decays_with_distance(self):
    got = np.asarray(forgetting_bias(self.logits))
    lower = np.tril_indices(9)
    self.assertTrue(np.all(got[..., lower[0], lower[1]] <= 0.0))
    np.testing.assert_array_equal(np.diagonal(got, axis1=-2, axis2=-1), 0.0)
    # Along a row, moving the key further back only adds log gates (each < 0).
    for i in range(1, 9):
      self.assertTrue(np.all(np.diff(got[:, :, i, :i + 1], axis=-1) > 0))

  def test_constant_gates_are_alibi_with_slope_minus_log_gate(self):
    logits = jnp.broadcast_to(jnp.array([0.0, 2.0, -1.0]), (1, 6, 3))
    got = np.asarray(forgetting_bias(logits))[0]
    slopes = -_log_sigmoid(np.array([0.0, 2.0, -1.0]))
    dist = np.arange(6)[:, None] - np.arange(6)[None, :]
    np.testing.assert_allclose(got, -slopes[:, None, None] * dist[None], rtol=1e-5, atol=1e-6)

  def test_tiles_and_cache_continuation(self):
    full = fox_cumulative_log_forget(self.logits)
    # A KV cache carries the last running sum: the second half continues it exactly.
    first = fox_cumulative_log_forget(self.logits[:, :4])
    second = fox_cumulative_log_forget(self.logits[:, 4:], initial=first[:, -1])
    np.testing.assert_allclose(jnp.concatenate([first, second], axis=1), full, rtol=1e-6,
                               atol=1e-6)
    # A tile of the bias is the bias of the tile's rows and columns.
    whole = fox_bias(full, full)
    tile = fox_bias(full[:, 5:8], full[:, 1:4])
    np.testing.assert_array_equal(tile, whole[:, :, 5:8, 1:4])

  def test_broadcasts_batch_and_keeps_float32(self):
    c = fox_cumulative_log_forget(self.logits.astype(jnp.bfloat16))
    chex.assert_type(c, jnp.float32)
    got = fox_bias(c[:1], c)
    chex.assert_shape(got, (2, 3, 9, 9))
    got2 = fox_bias(c[0], c[0])  # No batch axis.
    chex.assert_shape(got2, (3, 9, 9))


class FoxFailureTest(absltest.TestCase):

  def test_bad_inputs_name_the_argument(self):
    with self.assertRaisesRegex(ValueError, "gate_logits must be a float"):
      fox_cumulative_log_forget(np.zeros((2, 3), np.int32))
    with self.assertRaisesRegex(ValueError, "gate_logits must have shape"):
      fox_cumulative_log_forget(np.zeros((3,), np.float32))
    with self.assertRaisesRegex(ValueError, "initial must have H = 3"):
      fox_cumulative_log_forget(np.zeros((1, 4, 3), np.float32),
                                initial=np.zeros((1, 2), np.float32))
    with self.assertRaisesRegex(ValueError, "same number of heads"):
      fox_bias(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


if __name__ == "__main__":
  absltest.main()

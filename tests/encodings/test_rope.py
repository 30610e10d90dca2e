"""Tests for RoPE: frequencies of every scaling, the rotation, layouts and HF configs."""

import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import rope
from pejax.encodings import rope_hf
from pejax.encodings import rope_scaling as rs

GOLDEN_FILE = pathlib.Path(__file__).with_name("hf_rope_goldens.json")

# Computed with transformers 5.24's ROPE_INIT_FUNCTIONS (the reference implementation), head_dim 8.
INV_FREQ_GOLDEN = {
    "default": (None, None, [1.0, 0.1, 0.01, 0.001], 1.0),
    "linear4": (rs.LinearScaling(4.0), None, [0.25, 0.025, 0.0025, 0.00025], 1.0),
    "dynamic_at_original": (rs.DynamicNTKScaling(4.0, 2048), 2048, [1.0, 0.1, 0.01, 0.001], 1.0),
    "dynamic_4096": (rs.DynamicNTKScaling(4.0, 2048), 4096,
                     [1.0, 0.058480359613895416, 0.0034199520014226437, 0.00019999999494757503],
                     1.0),
    "dynamic_8192": (rs.DynamicNTKScaling(4.0, 2048), 8192,
                     [1.0, 0.042529039084911346, 0.0018087191274389625, 7.69230755395256e-05],
                     1.0),
    "yarn": (rs.YaRNScaling(4.0, 2048), None,
             [1.0, 0.1, 0.00624999962747097, 0.0002500000118743628], 1.138629436111989),
    "yarn_no_truncate": (rs.YaRNScaling(4.0, 2048, truncate=False), None,
                         [1.0, 0.1, 0.005056971684098244, 0.0002500000118743628],
                         1.138629436111989),
    "llama3": (rs.Llama3Scaling(8.0, 1.0, 4.0, 1024), None,
               [1.0, 0.1, 0.003086760640144348, 0.0001250000059371814], 1.0),
    "longrope_long": (rs.LongRoPEScaling([1, 1, 1, 1], [1, 1.5, 2, 4], 4096), 4097,
                      [1.0, 0.06666667014360428, 0.004999999888241291, 0.0002500000118743628],
                      1.0),
}

X_1_TO_8 = np.arange(1, 9, dtype=np.float32)
APPLY_GOLDEN = {
    "half": [-1.6955925368997815, 0.1375517100168968, 2.7886816045815874, 3.97598203487184,
             -4.8088424749423595, 6.323059348691219, 7.086836734980443, 8.011963982593555],
    "interleaved": [-1.27223251272018, -1.8388649851410237, 1.6839286196854772,
                    4.70790658401419, 4.817777171652034, 6.147277700275833, 6.975968534880683,
                    8.020963969521036],
}


def _rotate_pairs_reference(x, positions, inv_freq, layout, factor=1.0):
  """float64 real-matrix rotation, written independently of the library.

  The angle is the float32 product (the contract, as in HF), the rest is float64.
  """
  x = np.asarray(x, np.float64)
  out = x.copy()
  half = len(inv_freq)
  theta = (np.asarray(positions, np.float32)[..., :, None, None] *
           np.asarray(inv_freq, np.float32)).astype(np.float64)
  cos, sin = np.cos(theta) * factor, np.sin(theta) * factor
  if layout == "half":
    a, b = x[..., :half], x[..., half:2 * half]
    out[..., :half] = a * cos - b * sin
    out[..., half:2 * half] = b * cos + a * sin
  else:
    a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
    out[..., 0:2 * half:2] = a * cos - b * sin
    out[..., 1:2 * half:2] = b * cos + a * sin
  return out


class RopeInvFreqTest(chex.TestCase):

  @parameterized.named_parameters(*[(k, *v) for k, v in INV_FREQ_GOLDEN.items()])
  def test_golden_inv_freq(self, scaling, seq_len, expected, attention):
    inv_freq, factor = rope.rope_inv_freq(rope.RopeConfig(8, scaling=scaling), seq_len=seq_len)
    chex.assert_type(inv_freq, jnp.float32)
    chex.assert_shape(inv_freq, (4,))
    np.testing.assert_allclose(inv_freq, expected, rtol=1e-6)
    self.assertAlmostEqual(factor, attention, places=12)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("4096", 4096), ("8192", 8192), ("below", 1000))
  def test_dynamic_ntk_traced_seq_len_matches_concrete(self, seq_len):
    config = rope.RopeConfig(8, scaling=rs.DynamicNTKScaling(4.0, 2048))
    traced = self.variant(lambda n: rope.rope_inv_freq(config, seq_len=n)[0])(
        jnp.int32(seq_len))
    np.testing.assert_allclose(traced, rope.rope_inv_freq(config, seq_len=seq_len)[0], rtol=2e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_longrope_traced_switch(self):
    config = rope.RopeConfig(8, scaling=rs.LongRoPEScaling([1, 1, 1, 1], [1, 1.5, 2, 4], 4096))
    fn = self.variant(lambda n: rope.rope_inv_freq(config, seq_len=n)[0])
    np.testing.assert_allclose(fn(jnp.int32(4096)), [1.0, 0.1, 0.01, 0.001], rtol=1e-6)
    np.testing.assert_allclose(fn(jnp.int32(4097)), INV_FREQ_GOLDEN["longrope_long"][2], rtol=1e-6)

  def test_yarn_attention_factor_golden(self):
    self.assertAlmostEqual(
        rs.yarn_attention_factor(rs.YaRNScaling(40.0, 4096, mscale=1, mscale_all_dim=0.5)),
        1.1557219901962608, places=12)
    self.assertAlmostEqual(
        rs.yarn_attention_factor(rs.YaRNScaling(40.0, 4096, mscale=0.7, mscale_all_dim=0.7)),
        1.0, places=12)
    self.assertAlmostEqual(rs.yarn_attention_factor(rs.YaRNScaling(40.0, 4096)),
                           1.3688879454113936, places=12)

  def test_yarn_correction_range_golden(self):
    raw = rs.yarn_correction_range(rs.YaRNScaling(4.0, 2048, truncate=False), dim=8, base=1e4)
    np.testing.assert_allclose(raw, (1.0080001056257721, 2.513150083945678), rtol=1e-12)
    self.assertEqual(rs.yarn_correction_range(rs.YaRNScaling(4.0, 2048), dim=8, base=1e4),
                     (1, 3))

  def test_longrope_attention_factor_golden(self):
    scaling = rs.LongRoPEScaling([1.0] * 4, [2.0] * 4, 4096, factor=131072 / 4096)
    self.assertAlmostEqual(rs.longrope_attention_factor(scaling), 1.1902380714238083, places=12)
    self.assertEqual(rs.longrope_attention_factor(rs.LongRoPEScaling([1.0], [2.0], 4096)), 1.0)

  def test_static_ntk_base_golden(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8, scaling=rs.NTKScaling(4.0)))
    expected, _ = rope.rope_inv_freq(rope.RopeConfig(8, base=63496.04207872797))
    np.testing.assert_allclose(inv_freq, expected, rtol=1e-6)

  def test_ntk_lowest_frequency_equals_position_interpolation(self):
    for factor in (2.0, 4.0, 16.0):
      ntk, _ = rope.rope_inv_freq(rope.RopeConfig(64, scaling=rs.NTKScaling(factor)))
      pi, _ = rope.rope_inv_freq(rope.RopeConfig(64, scaling=rs.LinearScaling(factor)))
      np.testing.assert_allclose(ntk[-1], pi[-1], rtol=1e-5)
      np.testing.assert_allclose(ntk[0], 1.0)  # The highest frequency is kept.

  def test_yarn_keeps_high_and_divides_low_frequencies(self):
    base_freq, _ = rope.rope_inv_freq(rope.RopeConfig(128))
    scaling = rs.YaRNScaling(8.0, 4096)
    yarn_freq, _ = rope.rope_inv_freq(rope.RopeConfig(128, scaling=scaling))
    low, high = rs.yarn_correction_range(scaling, dim=128, base=10000.0)
    np.testing.assert_allclose(yarn_freq[:low], base_freq[:low], rtol=1e-6)
    np.testing.assert_allclose(yarn_freq[high:], base_freq[high:] / 8.0, rtol=1e-6)
    ratio = np.asarray(yarn_freq / base_freq)
    self.assertTrue(np.all(np.diff(ratio) <= 1e-7))  # Monotone blend between the two.

  def test_llama3_bands(self):
    base_freq, _ = rope.rope_inv_freq(rope.RopeConfig(128, base=500000.0))
    scaled, _ = rope.rope_inv_freq(
        rope.RopeConfig(128, base=500000.0, scaling=rs.Llama3Scaling(8.0, 1.0, 4.0, 8192)))
    wavelen = 2 * np.pi / np.asarray(base_freq)
    high_band = wavelen < 8192 / 4.0
    low_band = wavelen > 8192 / 1.0
    np.testing.assert_allclose(scaled[high_band], base_freq[high_band], rtol=1e-6)
    np.testing.assert_allclose(scaled[low_band], base_freq[low_band] / 8.0, rtol=1e-6)
    mid = ~high_band & ~low_band
    self.assertTrue(np.all(scaled[mid] <= base_freq[mid]))
    self.assertTrue(np.all(scaled[mid] >= base_freq[mid] / 8.0))

  def test_dynamic_ntk_equals_default_up_to_original(self):
    config = rope.RopeConfig(16, scaling=rs.DynamicNTKScaling(4.0, 512))
    default, _ = rope.rope_inv_freq(rope.RopeConfig(16))
    for seq_len in (None, 1, 100, 511, 512):
      np.testing.assert_array_equal(rope.rope_inv_freq(config, seq_len=seq_len)[0], default)
    self.assertTrue(np.all(rope.rope_inv_freq(config, seq_len=513)[0][1:] < default[1:]))

  def test_partial_rotary_frequencies_use_rotary_dim(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(80, rotary_dim=32))
    chex.assert_shape(inv_freq, (16,))
    np.testing.assert_allclose(inv_freq, 1.0 / 10000.0 ** (np.arange(0, 32, 2) / 32), rtol=1e-6)


class HFConfigTest(chex.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.golden = json.loads(GOLDEN_FILE.read_text())

  def test_hf_goldens_all_cases(self):
    self.assertGreaterEqual(len(self.golden["cases"]), 9)
    for name, case in self.golden["cases"].items():
      config = rope_hf.rope_config_from_hf(case["config"])
      self.assertEqual(config.layout, "half", name)
      for result in case["results"]:
        inv_freq, factor = rope.rope_inv_freq(config, seq_len=result["seq_len"])
        np.testing.assert_allclose(inv_freq, result["inv_freq"], rtol=1e-6,
                                   err_msg=f"{name} seq_len={result['seq_len']}")
        self.assertAlmostEqual(factor, result["attention_factor"], places=10, msg=name)

  def test_reads_head_dim_and_partial_rotary(self):
    case = self.golden["cases"]["phi2-style partial rotary (older form)"]["config"]
    config = rope_hf.rope_config_from_hf(case)
    self.assertEqual((config.head_dim, config.rotary_dim, config.base), (80, 32, 10000.0))
    newer = self.golden["cases"]["partial rotary inside rope_parameters (newer form)"]["config"]
    self.assertEqual(rope_hf.rope_config_from_hf(newer).rotary_dim, 32)

  @parameterized.named_parameters(
      ("default", None), ("linear", rs.LinearScaling(2.0)),
      ("dynamic", rs.DynamicNTKScaling(2.0, 4096)),
      ("yarn", rs.YaRNScaling(4.0, 4096, beta_fast=16, mscale=1.0, mscale_all_dim=0.5,
                              truncate=False)),
      ("llama3", rs.Llama3Scaling(8.0, 1.0, 4.0, 8192)),
      ("longrope", rs.LongRoPEScaling([1.0, 1.1] * 16, [2.0, 3.0] * 16, 4096, factor=32.0)))
  def test_round_trip_both_forms(self, scaling):
    config = rope.RopeConfig(64, base=50000.0, rotary_dim=None, scaling=scaling)
    for form in ("rope_parameters", "rope_scaling"):
      hf = rope_hf.rope_config_to_hf(config, form=form, max_position_embeddings=None)
      hf.setdefault("max_position_embeddings", 4096)
      self.assertEqual(rope_hf.rope_config_from_hf(hf), config, form)
    partial = rope.RopeConfig(80, rotary_dim=32, scaling=scaling if scaling is None else None)
    self.assertEqual(rope_hf.rope_config_from_hf(rope_hf.rope_config_to_hf(partial)), partial)

  @parameterized.named_parameters(
      ("not_a_dict", [1, 2], "config must be a dict"),
      ("no_theta", {"head_dim": 64}, "rope_theta"),
      ("no_head_dim", {"rope_theta": 1e4}, "hidden_size"),
      ("bad_heads", {"rope_theta": 1e4, "hidden_size": 100, "num_attention_heads": 3},
       "num_attention_heads"),
      ("unknown_type", {"rope_theta": 1e4, "head_dim": 64, "rope_scaling": {"type": "magic"}},
       "rope_type"),
      ("missing_factor", {"rope_theta": 1e4, "head_dim": 64,
                          "rope_scaling": {"rope_type": "linear"}}, "factor"),
      ("scaling_not_dict", {"rope_theta": 1e4, "head_dim": 64, "rope_scaling": "yarn"},
       "rope_scaling"),
      ("partial_too_big", {"rope_theta": 1e4, "head_dim": 64, "partial_rotary_factor": 1.5},
       "partial_rotary_factor"),
      ("theta_string", {"rope_theta": "1e4", "head_dim": 64}, "rope_theta"),
      ("llama3_missing", {"rope_theta": 1e4, "head_dim": 64, "max_position_embeddings": 8192,
                          "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
       "low_freq_factor"),
      ("dynamic_no_max", {"rope_theta": 1e4, "head_dim": 64,
                          "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
       "max_position_embeddings"),
      ("negative_factor", {"rope_theta": 1e4, "head_dim": 64,
                           "rope_scaling": {"rope_type": "linear", "factor": -2.0}}, "factor"),
  )
  def test_malformed_configs(self, config, match):
    with self.assertRaisesRegex(ValueError, match):
      rope_hf.rope_config_from_hf(config)

  def test_to_hf_rejects_interleaved_and_static_ntk(self):
    with self.assertRaisesRegex(ValueError, "layout"):
      rope_hf.rope_config_to_hf(rope.RopeConfig(8, layout="interleaved"))
    with self.assertRaisesRegex(ValueError, "NTKScaling"):
      rope_hf.rope_config_to_hf(rope.RopeConfig(8, scaling=rs.NTKScaling(2.0)))


class ApplyRopeTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_golden(self, layout):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    fn = self.variant(lambda x, p: rope.apply_rope(x, p, inv_freq, layout=layout))
    out = fn(X_1_TO_8.reshape(1, 1, 8), jnp.array([3], jnp.int32))
    np.testing.assert_allclose(out.reshape(-1), APPLY_GOLDEN[layout], rtol=1e-6, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(layout=("half", "interleaved"), rotary_dim=(None, 16))
  def test_matches_float64_reference_and_preserves_norm(self, layout, rotary_dim):
    config = rope.RopeConfig(32, rotary_dim=rotary_dim, layout=layout)
    inv_freq, _ = rope.rope_inv_freq(config)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 7, 3, 32))
    positions = jnp.array([[0, 1, 2, 5, 100, 1000, 4095], [7, 8, 9, 10, 11, 12, 13]], jnp.int32)
    out = self.variant(lambda x, p: rope.apply_rope(x, p, inv_freq, layout=layout))(x, positions)
    chex.assert_shape(out, x.shape)
    chex.assert_tree_all_finite(out)
    np.testing.assert_allclose(out, _rotate_pairs_reference(x, positions, inv_freq, layout),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jnp.linalg.norm(out, axis=-1), jnp.linalg.norm(x, axis=-1),
                               rtol=1e-5)
    r = config.num_rotated
    np.testing.assert_array_equal(out[..., r:], x[..., r:])  # Pass-through dims untouched.

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_scores_depend_only_on_relative_position(self, layout):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(16, layout=layout))
    q = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 16))
    k = jax.random.normal(jax.random.PRNGKey(2), (1, 1, 16))

    @self.variant
    def score(m, n):
      qr = rope.apply_rope(q, m[None], inv_freq, layout=layout)
      kr = rope.apply_rope(k, n[None], inv_freq, layout=layout)
      return jnp.sum(qr * kr)

    for delta in (0, 1, 3, 17, 250, -40):
      reference = score(jnp.int32(max(delta, 0) + 5), jnp.int32(max(-delta, 0) + 5))
      for offset in (0, 11, 999, 20000):
        m, n = offset + max(delta, 0) + 5, offset + max(-delta, 0) + 5
        np.testing.assert_allclose(score(jnp.int32(m), jnp.int32(n)), reference, rtol=2e-4,
                                   atol=2e-4)

  @chex.variants(with_jit=True, without_jit=True)
  def test_complex_and_real_forms_agree(self):
    """The interleaved (complex) rotation equals the half (real) rotation on permuted channels."""
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(24, rotary_dim=16))
    perm = rope.rope_layout_permutation(24, rotary_dim=16)
    x_half = jax.random.normal(jax.random.PRNGKey(3), (2, 5, 4, 24))
    positions = jnp.arange(5, dtype=jnp.int32) * 37
    fn = self.variant(lambda x, layout: rope.apply_rope(x, positions, inv_freq, layout=layout),
                      static_argnums=1)
    np.testing.assert_allclose(fn(x_half[..., perm], "interleaved"), fn(x_half, "half")[..., perm],
                               rtol=1e-5, atol=1e-5)

  @pytest.mark.slow
  def test_permuted_weights_interleaved_equals_half(self):
    num_heads, head_dim, d_model = 3, 8, 12
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    x = jax.random.normal(keys[0], (6, d_model))
    w_q = jax.random.normal(keys[1], (d_model, num_heads * head_dim))
    w_k = jax.random.normal(keys[2], (d_model, num_heads * head_dim))
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(head_dim))
    positions = jnp.arange(6, dtype=jnp.int32) * 5

    def scores(wq, wk, layout):
      q = rope.apply_rope((x @ wq).reshape(6, num_heads, head_dim), positions, inv_freq,
                          layout=layout)
      k = rope.apply_rope((x @ wk).reshape(6, num_heads, head_dim), positions, inv_freq,
                          layout=layout)
      return jnp.einsum("qhd,khd->hqk", q, k), q

    kwargs = dict(num_heads=num_heads, head_dim=head_dim, from_layout="half",
                  to_layout="interleaved")
    s_half, q_half = scores(w_q, w_k, "half")
    s_int, q_int = scores(rope.permute_rope_weights(w_q, **kwargs),
                          rope.permute_rope_weights(w_k, **kwargs), "interleaved")
    np.testing.assert_allclose(s_int, s_half, rtol=1e-4, atol=1e-4)
    perm = rope.rope_layout_permutation(head_dim)
    np.testing.assert_allclose(q_int, q_half[..., perm], rtol=1e-5, atol=1e-5)
    back = rope.permute_rope_weights(rope.permute_rope_weights(np.asarray(w_q), **kwargs),
                                     num_heads=num_heads, head_dim=head_dim,
                                     from_layout="interleaved", to_layout="half")
    np.testing.assert_array_equal(back, w_q)

  def test_permutation_golden(self):
    np.testing.assert_array_equal(rope.rope_layout_permutation(8), [0, 4, 1, 5, 2, 6, 3, 7])
    np.testing.assert_array_equal(rope.rope_layout_permutation(8, rotary_dim=4),
                                  [0, 2, 1, 3, 4, 5, 6, 7])

  @chex.variants(with_jit=True, without_jit=True)
  def test_attention_factor_scales_logits_by_its_square(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    q = jax.random.normal(jax.random.PRNGKey(5), (4, 2, 8))
    positions = jnp.arange(4, dtype=jnp.int32)
    fn = self.variant(lambda f: rope.apply_rope(q, positions, inv_freq, layout="half",
                                                attention_factor=f))
    plain, scaled = fn(1.0), fn(1.25)
    np.testing.assert_allclose(jnp.sum(scaled * scaled), 1.25 ** 2 * jnp.sum(plain * plain),
                               rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  @pytest.mark.slow
  def test_bf16_at_large_positions_matches_float32_reference(self, layout):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(64))
    x = jax.random.normal(jax.random.PRNGKey(6), (3, 4, 2, 64)).astype(jnp.bfloat16)
    positions = jnp.array([100000, 100001, 100003, 99999], jnp.int32)
    out = self.variant(lambda x: rope.apply_rope(x, positions, inv_freq, layout=layout))(x)
    chex.assert_type(out, jnp.bfloat16)
    reference = _rotate_pairs_reference(np.asarray(x, np.float32), positions, inv_freq, layout)
    # Angles are exact float32; the only error left is the final rounding to bf16 (2**-8 rel).
    np.testing.assert_allclose(np.asarray(out, np.float32), reference, rtol=2 ** -8, atol=2e-2)

  def test_positions_broadcast_over_batch(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    x = jax.random.normal(jax.random.PRNGKey(7), (3, 5, 2, 8))
    shared = rope.apply_rope(x, jnp.arange(5, dtype=jnp.int32), inv_freq, layout="half")
    per_row = rope.apply_rope(x, jnp.tile(jnp.arange(5, dtype=jnp.int32), (3, 1)), inv_freq,
                              layout="half")
    np.testing.assert_array_equal(shared, per_row)

  def test_no_retrace_for_same_shapes(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def fn(x, positions):
      return rope.apply_rope(x, positions, inv_freq, layout="interleaved")

    for seed in range(3):
      fn(jax.random.normal(jax.random.PRNGKey(seed), (2, 4, 1, 8)),
         jnp.arange(4, dtype=jnp.int32) + seed)

  def test_runs_with_rank_promotion_raise(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8, rotary_dim=4))
    with jax.numpy_rank_promotion("raise"):
      for layout in ("half", "interleaved"):
        rope.apply_rope(jnp.ones((2, 3, 4, 8)), jnp.arange(3, dtype=jnp.int32), inv_freq,
                        layout=layout).block_until_ready()

  def test_per_head_angles(self):
    x = jax.random.normal(jax.random.PRNGKey(8), (5, 2, 8))
    angles = jax.random.uniform(jax.random.PRNGKey(9), (5, 2, 4))
    out = rope.rotate_with_angles(x, angles, layout="half", per_head=True)
    for h in range(2):
      np.testing.assert_allclose(
          out[:, h], rope.rotate_with_angles(x[:, h:h + 1], angles[:, h], layout="half")[:, 0],
          rtol=1e-6)


class PerRowCosSinTest(chex.TestCase):
  """rope_cos_sin: per-row positions in [0, L) come from one gathered table, bitwise equal."""

  def setUp(self):
    super().setUp()
    self.inv, _ = rope.rope_inv_freq(rope.RopeConfig(16))
    self.x = jax.random.normal(jax.random.PRNGKey(3), (3, 12, 2, 16))

  def _direct(self, positions):
    angles = rope.rope_angles(positions, self.inv)
    return jnp.cos(angles), jnp.sin(angles)

  @parameterized.named_parameters(
      ("packed_in_range", [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5], list(range(12)),
                           [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2]]),
      ("decode_offset_past_L", [list(range(100, 112)), list(range(12)), [7] * 12]),
      ("negative", [list(range(-1, 11)), list(range(12)), list(range(12))]),
      ("int32_extremes", [[2**31 - 1] * 12, list(range(12)), [-2**31] * 12]))
  def test_equals_the_direct_evaluation_bitwise(self, rows):
    positions = jnp.asarray(rows, jnp.int32)
    for fn in (rope.rope_cos_sin, jax.jit(rope.rope_cos_sin)):
      cos, sin = fn(positions, self.inv)
      want_cos, want_sin = self._direct(positions)
      np.testing.assert_array_equal(cos, want_cos)
      np.testing.assert_array_equal(sin, want_sin)
    # And the rotation: per-row apply_rope equals rotating each row on its own (to float32
    # rounding: XLA fuses the batched and the one-row multiply differently).
    for layout in rope.LAYOUTS:
      out = jax.jit(lambda x, p, layout=layout: rope.apply_rope(x, p, self.inv, layout=layout))(
          self.x, positions)
      for b in range(3):
        np.testing.assert_allclose(
            out[b], rope.apply_rope(self.x[b], positions[b], self.inv, layout=layout),
            rtol=1e-6, atol=1e-6)

  def test_gradients_and_vmap_match_the_direct_path(self):
    positions = jnp.asarray([[0, 1, 2, 3] * 3, list(range(12)), list(range(5, 17))], jnp.int32)
    loss = lambda x, inv: jnp.sum(jnp.sin(rope.apply_rope(x, positions, inv, layout="half")))
    direct = lambda x, inv: jnp.sum(jnp.sin(rope.rotate_with_angles(
        x, rope.rope_angles(positions, inv), layout="half")))
    # Jitted: one program each instead of one per primitive (issue 44).
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(self.x, self.inv)
    want = jax.jit(jax.grad(direct, argnums=(0, 1)))(self.x, self.inv)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)
    batched = jax.jit(jax.vmap(lambda p: rope.rope_cos_sin(p[None].repeat(2, 0), self.inv)[0]))(
        positions)
    np.testing.assert_array_equal(batched[:, 0], self._direct(positions)[0])

  def test_one_row_takes_the_direct_path(self):
    jaxpr = str(jax.make_jaxpr(rope.rope_cos_sin)(jnp.arange(12)[None], self.inv))
    self.assertNotIn("cond", jaxpr)
    jaxpr = str(jax.make_jaxpr(rope.rope_cos_sin)(jnp.zeros((2, 12), jnp.int32), self.inv))
    self.assertIn("cond", jaxpr)


class RopeFailureTest(chex.TestCase):

  @parameterized.named_parameters(
      ("odd_head_dim", dict(head_dim=63), "head_dim must be even, got 63"),
      ("zero_head_dim", dict(head_dim=0), "head_dim"),
      ("rotary_too_big", dict(head_dim=8, rotary_dim=16), "rotary_dim must be <= head_dim"),
      ("rotary_odd", dict(head_dim=8, rotary_dim=5), "rotary_dim must be even"),
      ("bad_layout", dict(head_dim=8, layout="neox"), "layout must be one of"),
      ("bad_base", dict(head_dim=8, base=-1.0), "base"),
      ("bad_scaling", dict(head_dim=8, scaling="yarn"), "scaling must be"),
      ("longrope_len", dict(head_dim=8, scaling=rs.LongRoPEScaling([1.0] * 3, [1.0] * 3, 64)),
       "rotary_dim // 2 = 4"),
  )
  def test_bad_config(self, kwargs, match):
    with self.assertRaisesRegex(ValueError, match):
      rope.RopeConfig(**kwargs)

  @parameterized.named_parameters(
      ("linear_zero", lambda: rs.LinearScaling(0.0)),
      ("linear_negative", lambda: rs.LinearScaling(-1.0)),
      ("ntk_nan", lambda: rs.NTKScaling(float("nan"))),
      ("dynamic", lambda: rs.DynamicNTKScaling(0.0, 2048)),
      ("yarn", lambda: rs.YaRNScaling(-4.0, 2048)),
      ("llama3", lambda: rs.Llama3Scaling(0.0, 1.0, 4.0, 8192)),
      ("longrope", lambda: rs.LongRoPEScaling([1.0], [1.0], 64, factor=0.0)),
  )
  def test_factor_must_be_positive(self, make):
    with self.assertRaisesRegex(ValueError, "factor"):
      make()

  def test_other_scaling_fields(self):
    with self.assertRaisesRegex(ValueError, "original_max_position"):
      rs.YaRNScaling(4.0, 0)
    with self.assertRaisesRegex(ValueError, "beta_fast must be greater than beta_slow"):
      rs.YaRNScaling(4.0, 2048, beta_fast=1, beta_slow=2)
    with self.assertRaisesRegex(ValueError, "high_freq_factor"):
      rs.Llama3Scaling(8.0, 4.0, 1.0, 8192)
    with self.assertRaisesRegex(ValueError, "same length"):
      rs.LongRoPEScaling([1.0, 1.0], [1.0], 64)
    with self.assertRaisesRegex(ValueError, "long_factor"):
      rs.LongRoPEScaling([1.0], [-1.0], 64)

  def test_bad_apply_inputs(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    x = jnp.ones((2, 5, 3, 8))
    with self.assertRaisesRegex(ValueError, r"positions length \(4\) must match"):
      rope.apply_rope(x, jnp.arange(4, dtype=jnp.int32), inv_freq, layout="half")
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      rope.apply_rope(x, jnp.arange(5, dtype=jnp.float32), inv_freq, layout="half")
    with self.assertRaisesRegex(ValueError, "does not broadcast"):
      rope.apply_rope(x, jnp.zeros((3, 5), jnp.int32), inv_freq, layout="half")
    with self.assertRaisesRegex(ValueError, "exceed the head dim"):
      rope.apply_rope(jnp.ones((5, 3, 4)), jnp.arange(5, dtype=jnp.int32), inv_freq,
                      layout="half")
    with self.assertRaisesRegex(ValueError, "x must have shape"):
      rope.apply_rope(jnp.ones((5, 8)), jnp.arange(5, dtype=jnp.int32), inv_freq, layout="half")
    with self.assertRaisesRegex(ValueError, "layout must be one of"):
      rope.apply_rope(x, jnp.arange(5, dtype=jnp.int32), inv_freq, layout="neox")
    with self.assertRaisesRegex(ValueError, "inv_freq must be float32"):
      rope.apply_rope(x, jnp.arange(5, dtype=jnp.int32), inv_freq.astype(jnp.bfloat16),
                      layout="half")
    with self.assertRaisesRegex(ValueError, "seq_len"):
      rope.rope_inv_freq(rope.RopeConfig(8), seq_len=0)
    with self.assertRaisesRegex(ValueError, "seq_len"):
      rope.rope_inv_freq(rope.RopeConfig(8), seq_len=2.5)

  def test_bad_permutation_inputs(self):
    w = np.zeros((4, 16))
    with self.assertRaisesRegex(ValueError, "num_heads"):
      rope.permute_rope_weights(w, num_heads=0, head_dim=8, from_layout="half",
                                to_layout="interleaved")
    with self.assertRaisesRegex(ValueError, "num_heads \\* head_dim = 24"):
      rope.permute_rope_weights(w, num_heads=3, head_dim=8, from_layout="half",
                                to_layout="interleaved")
    with self.assertRaisesRegex(ValueError, "head_dim must be even"):
      rope.rope_layout_permutation(7)


if __name__ == "__main__":
  absltest.main()

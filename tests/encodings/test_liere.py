"""Tests for pejax/encodings/liere.py and pejax/encodings/liere_rotation.py (LieRE, ComRoPE)."""

from __future__ import annotations

import functools
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from pejax.encodings import liere
from pejax.encodings import liere_rotation
from pejax.encodings import position_grids
from pejax.encodings import rope

GOLDENS = json.loads((pathlib.Path(__file__).parent / "liere_goldens.json").read_text())
GOLDEN_CASES = tuple((case["name"], case) for case in GOLDENS["cases"])
# Authors' float32 torch output vs ours: the largest difference measured is 5.4e-6 (liere_1d,
# |rotated| <= 3); the tolerance leaves float32-rounding room, nothing more.
GOLDEN_ATOL = 2e-5


# Jitted once for the file (issue 44): an eager LieRE call compiles each primitive on its own
# (~30 programs a call). One golden case keeps the eager path (test_runs_op_by_op_outside_jit).
_apply = jax.jit(liere.apply_liere)
_rotations = jax.jit(liere.liere_rotations, static_argnames=("max_squarings", "table_size"))


def _generators_of(case) -> jax.Array:
  params = np.asarray(case["generator_params"], np.float32)
  num_axes = len(case["positions"][0])
  if case["variant"] == "liere":
    if case["parametrization"] == "upper_triangle":
      return liere.liere_generators(params)
    return liere.skew_symmetric(params)
  if case["variant"] == "comrope_ap":
    return liere.comrope_ap_generators(params, num_axes=num_axes)
  return liere.comrope_ld_generators(params, np.asarray(case["multipliers"], np.float32))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _random_generators(seed, variant, num_axes, heads=2, blocks=3, size=4) -> jax.Array:
  keys = jax.random.split(jax.random.key(seed), 2)
  if variant == "liere":
    return liere.liere_generators(
        jax.random.normal(keys[0], (num_axes, heads, blocks, size, size)))
  params = jax.random.normal(keys[0], (heads, blocks, size, size))
  if variant == "comrope_ap":
    return liere.comrope_ap_generators(params, num_axes=num_axes)
  return liere.comrope_ld_generators(params, jax.random.normal(keys[1], (num_axes, blocks)))


def _relative_error(generators, p, p_other) -> float:
  """max |R(p)^T R(p') - R(p' - p)| over blocks."""
  return float(_relative_error_jit(generators, p, p_other))


@jax.jit
def _relative_error_jit(generators, p, p_other):
  rotations = liere.liere_rotations(jnp.stack([p, p_other]), generators)
  product = jnp.einsum("...ji,...jk->...ik", rotations[0], rotations[1])
  relative = liere.liere_rotations((p_other - p)[None], generators)[0]
  return jnp.max(jnp.abs(product - relative))


class GoldenTest(chex.TestCase):
  """The authors' code (tests/golden/make_liere_goldens.py) against ours."""

  @parameterized.named_parameters(*GOLDEN_CASES)
  def test_matches_the_authors_code(self, case):
    generators = _generators_of(case)
    query = jnp.asarray(case["query"], jnp.float32)
    positions = jnp.asarray(case["positions"], jnp.float32)
    rotated = _apply(query, positions, generators)
    want = np.asarray(case["rotated"], np.float32)
    chex.assert_shape(rotated, want.shape)
    chex.assert_type(rotated, jnp.float32)
    np.testing.assert_allclose(np.asarray(rotated), want, atol=GOLDEN_ATOL, rtol=0)

  def test_runs_op_by_op_outside_jit(self):
    case = dict(GOLDEN_CASES)["comrope_ld_3d"]
    rotated = liere.apply_liere(jnp.asarray(case["query"], jnp.float32),
                                jnp.asarray(case["positions"], jnp.float32), _generators_of(case))
    np.testing.assert_allclose(np.asarray(rotated), np.asarray(case["rotated"], np.float32),
                               atol=GOLDEN_ATOL, rtol=0)

  def test_goldens_cover_every_variant_and_dimension(self):
    covered = {(c["variant"], len(c["positions"][0])) for c in GOLDENS["cases"]}
    self.assertTrue({("liere", 1), ("liere", 2), ("liere", 3), ("comrope_ap", 2),
                     ("comrope_ld", 2), ("comrope_ld", 3)} <= covered, covered)

  def test_goldens_are_not_trivial(self):
    # The rotations move the vectors a lot: a no-op implementation could not pass.
    for case in GOLDENS["cases"]:
      moved = np.abs(np.asarray(case["rotated"]) - np.asarray(case["query"])).max()
      self.assertGreater(moved, 0.5, case["name"])


class ExponentialTest(parameterized.TestCase):

  @parameterized.named_parameters(("b3", 3), ("b4", 4), ("b8", 8))
  def test_rotations_match_float64_expm(self, size):
    # jax.scipy.linalg.expm (jax 0.10) is off by ~1e-3 for float32 norms near 8; ours is not.
    params = jax.random.normal(jax.random.key(size), (1, 1, 1, size, size))
    generators = liere.skew_symmetric(params)
    positions = jnp.asarray([[0.0], [0.3], [1.0], [3.0], [7.5], [20.0], [90.0]], jnp.float32)
    rotations = np.asarray(_rotations(positions, generators))[:, 0, 0]
    generator = np.asarray(generators, np.float64)[0, 0, 0]
    for n, p in enumerate(np.asarray(positions)[:, 0]):
      want = scipy.linalg.expm(float(p) * generator)
      norm = np.abs(float(p) * generator).sum(0).max()
      np.testing.assert_allclose(rotations[n], want, atol=2e-7 * max(norm, 1.0) + 1e-7,
                                 err_msg=f"position {p}, L1 norm {norm:.1f}")

  def test_too_large_an_exponent_is_nan_not_wrong(self):
    generators = liere.liere_rope_generators(4, block_size=4)
    rotations = liere.liere_rotations(jnp.asarray([[1], [100]], jnp.int32), generators,
                                      max_squarings=4)
    self.assertTrue(bool(jnp.all(jnp.isfinite(rotations[0]))))  # ||.||_1 = 1 <= 2^3.
    self.assertTrue(bool(jnp.all(jnp.isnan(rotations[1]))))  # 100 > 2^3.

  def test_gradients_are_finite_and_match_finite_differences(self):
    params = jax.random.normal(jax.random.key(0), (2, 1, 2, 4, 4))
    positions = jnp.asarray([[0.5, 1.0], [2.0, -1.0]], jnp.float32)
    x = jax.random.normal(jax.random.key(1), (2, 2, 8))
    direction = jax.random.normal(jax.random.key(2), params.shape)

    def loss(p):
      return jnp.sum(jnp.sin(liere.apply_liere(x, positions, liere.liere_generators(p))))

    grad = jax.jit(jax.grad(loss))(params)
    chex.assert_tree_all_finite(grad)
    eps = 3e-3  # float32 central differences: truncation and rounding both ~1e-4 here.
    loss = jax.jit(loss)
    numeric = (loss(params + eps * direction) - loss(params - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(grad * direction)), float(numeric), rtol=2e-3)


class PositionTableTest(parameterized.TestCase):
  """``table_size``: rotations gathered from a table of ``[0, P)``, the same numbers."""

  def setUp(self):
    super().setUp()
    generators = jax.random.normal(jax.random.key(0), (1, 2, 2, 4, 4))
    self.generators = generators - jnp.swapaxes(generators, -1, -2)
    # Per-row sorted positions, as randomized positions are drawn.
    self.positions = jnp.sort(jax.random.randint(jax.random.key(1), (3, 5), 0, 12), axis=-1)

  def test_equals_every_positions_own_exponential_values_and_gradients(self):
    x = jax.random.normal(jax.random.key(2), (3, 5, 2, 8))

    def loss(generators, table):
      rotations = liere.liere_rotations(self.positions[..., None], generators, table_size=table)
      return jnp.sum(jnp.sin(liere.apply_block_rotations(x, rotations)))

    direct = _rotations(self.positions[..., None], self.generators)
    for table in (12, 40):
      np.testing.assert_allclose(
          _rotations(self.positions[..., None], self.generators, table_size=table),
          direct, atol=1e-7)
      grad = jax.jit(jax.grad(loss), static_argnums=1)
      np.testing.assert_allclose(grad(self.generators, table), grad(self.generators, None),
                                 rtol=1e-5, atol=1e-6)

  def test_a_traced_position_outside_the_table_is_nan_never_a_clamped_row(self):
    rotate = jax.jit(lambda p: liere.liere_rotations(p[..., None], self.generators,
                                                     table_size=12))
    rotations = rotate(self.positions.at[0, 4].set(12).at[1, 0].set(-1))
    bad = jnp.isnan(rotations).any(axis=(-1, -2, -3, -4))
    np.testing.assert_array_equal(bad, jnp.zeros((3, 5), bool).at[0, 4].set(True)
                                  .at[1, 0].set(True))

  def test_bad_inputs_name_the_argument(self):
    cases = [(dict(table_size=0), "table_size must be a positive integer"),
             (dict(table_size=2.5), "table_size must be a positive integer"),
             (dict(table_size=8), r"positions must lie in \[0, table_size=8\).*to 11"),
             (dict(table_size=12, positions=self.positions.astype(jnp.float32)),
              "table_size needs integer positions"),
             (dict(table_size=12, generators=jnp.concatenate([self.generators] * 2)),
              "table_size needs 1-D positions")]
    for kwargs, message in cases:
      with self.subTest(kwargs=sorted(kwargs)):
        positions = kwargs.pop("positions", self.positions)
        generators = kwargs.pop("generators", self.generators)
        if generators.shape[0] == 2:
          positions = jnp.stack([positions, positions], -1)
        else:
          positions = positions[..., None]
        with self.assertRaisesRegex(ValueError, message):
          liere.liere_rotations(positions, generators, **kwargs)


class PropertiesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("liere_2d", "liere", 2), ("ap_3d", "comrope_ap", 3),
                                  ("ld_2d", "comrope_ld", 2))
  def test_rotations_are_orthogonal_and_preserve_norms(self, variant, num_axes):
    generators = _random_generators(0, variant, num_axes)
    positions = jax.random.uniform(jax.random.key(3), (5, num_axes), jnp.float32, -4.0, 4.0)
    rotations = self.variant(liere.liere_rotations)(positions, generators)
    chex.assert_shape(rotations, (5, 2, 3, 4, 4))
    gram = jnp.einsum("...ji,...jk->...ik", rotations, rotations)
    # Exponents of L1 norm up to ~40 here: float32 squarings leave a few 1e-6.
    np.testing.assert_allclose(np.asarray(gram), np.broadcast_to(np.eye(4), gram.shape),
                               atol=1e-5)
    x = jax.random.normal(jax.random.key(4), (3, 5, 4, 14))  # [B, N, H=4 over K=2, D=14 > 12]
    out = self.variant(liere.apply_liere)(x, positions, generators)
    np.testing.assert_allclose(np.asarray(jnp.linalg.norm(out, axis=-1)),
                               np.asarray(jnp.linalg.norm(x, axis=-1)), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(out[..., 12:]), np.asarray(x[..., 12:]))

  @parameterized.named_parameters(("ap_2d", "comrope_ap", 2), ("ld_2d", "comrope_ld", 2),
                                  ("ap_3d", "comrope_ap", 3), ("ld_3d", "comrope_ld", 3),
                                  ("liere_1d", "liere", 1))
  def test_commuting_generators_are_relative(self, variant, num_axes):
    generators = _random_generators(1, variant, num_axes)
    for seed in range(3):
      p, p_other = jax.random.uniform(jax.random.key(seed), (2, num_axes), jnp.float32, -3, 3)
      self.assertLess(_relative_error(generators, p, p_other), 1e-5)

  def test_liere_in_2d_is_not_relative(self):
    # Random 2-D LieRE generators do not commute: R(p)^T R(p') depends on more than p' - p.
    generators = _random_generators(1, "liere", 2)
    error = _relative_error(generators, jnp.asarray([1.0, 2.0]), jnp.asarray([2.5, -1.0]))
    self.assertGreater(error, 0.1)

  @parameterized.named_parameters(("ap", "comrope_ap"), ("ld", "comrope_ld"))
  def test_3d_video_logits_depend_on_offsets_only(self, variant):
    # A 2x3x3 video grid and the same grid shifted by (5, -2, 7): identical q.k logits.
    positions = position_grids.video_positions(2, 3, 3)  # [18, 3] int32
    generators = _random_generators(2, variant, 3, heads=1, blocks=3, size=4)
    q = jax.random.normal(jax.random.key(5), (18, 1, 12))
    k = jax.random.normal(jax.random.key(6), (18, 1, 12))

    @jax.jit  # One program for both grids (eager: every primitive compiled on its own).
    def logits(pos):
      return jnp.einsum("nhd,mhd->hnm", liere.apply_liere(q, pos, generators),
                        liere.apply_liere(k, pos, generators))

    shifted = positions + jnp.asarray([5, -2, 7], jnp.int32)
    # Equal up to float32 rounding, which grows with the rotation angles (the shift adds up to
    # 7 to each coordinate) and the logits' size (up to ~10): a relative 1e-4 as well as the
    # absolute 5e-5 (on an AMD EPYC Milan the LD variant differed by 6.7e-5, relative 1.8e-5,
    # in 2 of 324 logits; LieRE below is off by > 0.1 relative).
    np.testing.assert_allclose(np.asarray(logits(shifted)), np.asarray(logits(positions)),
                               rtol=1e-4, atol=5e-5)
    # LieRE with 3 non-commuting generators per block does not keep them.
    liere_generators = _random_generators(2, "liere", 3, heads=1, blocks=3, size=4)
    base = jnp.einsum("nhd,mhd->hnm", _apply(q, positions, liere_generators),
                      _apply(k, positions, liere_generators))
    other = jnp.einsum("nhd,mhd->hnm", _apply(q, shifted, liere_generators),
                       _apply(k, shifted, liere_generators))
    self.assertGreater(float(jnp.max(jnp.abs(base - other))), 1e-2)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("b2", 2), ("b4", 4), ("b16", 16))
  def test_rope_generators_give_rope(self, size):
    head_dim = 16
    x = jax.random.normal(jax.random.key(7), (2, 9, 3, head_dim))
    positions = jnp.asarray([[0, 1, 2, 3, 5, 8, 13, 21, 34]] * 2, jnp.int32) * 3
    generators = liere.liere_rope_generators(head_dim, block_size=size, base=10000.0)
    out = self.variant(liere.apply_liere)(x, positions[..., None], generators)
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(head_dim))
    want = rope.apply_rope(x, positions, inv_freq, layout="interleaved")
    # b = 2 is the closed form (the same float32 angles as apply_rope); larger blocks go
    # through the exponential, whose error grows with position * theta (here <= 102).
    np.testing.assert_allclose(np.asarray(out), np.asarray(want),
                               atol=1e-6 if size == 2 else 3e-5)

  def test_query_heads_share_their_key_heads_rotation(self):
    generators = _random_generators(3, "liere", 1, heads=2, blocks=2, size=4)  # K = 2
    positions = jnp.arange(5, dtype=jnp.int32)[:, None]
    x = jax.random.normal(jax.random.key(8), (5, 4, 8))  # H = 4: heads 0, 1 -> 0; 2, 3 -> 1.
    out = _apply(x, positions, generators)
    repeated = jnp.repeat(generators, 2, axis=1)  # K = 4, one rotation head per query head.
    np.testing.assert_allclose(np.asarray(out), np.asarray(_apply(x, positions, repeated)),
                               atol=1e-6)
    self.assertGreater(float(jnp.max(jnp.abs(out[:, 0] - _apply(
        x, positions, generators[:, 1:])[:, 0]))), 1e-2)  # Head 0 does not use K head 1.

  def test_output_dtype_follows_input(self):
    generators = _random_generators(4, "comrope_ld", 2)
    x = jax.random.normal(jax.random.key(9), (4, 2, 12)).astype(jnp.bfloat16)
    out = _apply(x, position_grids.image_positions(2, 2), generators)
    chex.assert_type(out, jnp.bfloat16)

  def test_interpolated_float_positions_are_accepted(self):
    generators = _random_generators(5, "comrope_ap", 2)
    scale = position_grids.interpolation_scale((2, 2), (4, 4))
    positions = position_grids.image_positions(4, 4, scale=scale)  # float32 0, 0.5, ...
    x = jax.random.normal(jax.random.key(10), (16, 2, 12))
    out = _apply(x, positions, generators)
    # Position (0.5, 0.5) applied twice is position (1, 1) (commuting generators).
    half = _rotations(positions[5:6], generators)[0]
    whole = _rotations(jnp.asarray([[1, 1]], jnp.int32), generators)[0]
    np.testing.assert_allclose(np.asarray(half @ half), np.asarray(whole), atol=2e-6)
    chex.assert_tree_all_finite(out)


class ModuleTest(parameterized.TestCase):

  @parameterized.named_parameters(("liere", "liere"), ("ap", "comrope_ap"), ("ld", "comrope_ld"))
  def test_rope_init_is_rope_in_1d(self, variant):
    module = liere_rotation.LieRERotation(16, 2, num_axes=1, block_size=8, variant=variant,
                                          init="rope", base=10000.0, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (1, 6, 4, 16))
    positions = jnp.arange(6, dtype=jnp.int32)[None] * 5
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(16))
    want = rope.apply_rope(x, positions, inv_freq, layout="interleaved")
    np.testing.assert_allclose(np.asarray(nnx.jit(lambda m, x, p: m(x, p))(
        module, x, positions[..., None])), np.asarray(want), atol=2e-5)

  def test_rope_init_in_2d_is_axial_on_block_partition(self):
    module = liere_rotation.LieRERotation(16, 1, num_axes=2, block_size=4, variant="liere",
                                          init="rope", rngs=nnx.Rngs(0))
    generators = np.asarray(module.generators())  # [2, 1, 4, 4, 4]
    for j in range(4):  # Block j turns with axis j % 2 only.
      self.assertGreater(np.abs(generators[j % 2, 0, j]).max(), 0.0)
      np.testing.assert_array_equal(generators[1 - j % 2, 0, j], 0.0)

  def test_random_init_follows_the_authors(self):
    module = liere_rotation.LieRERotation(16, 3, num_axes=2, block_size=4, rngs=nnx.Rngs(0))
    params = np.asarray(module.generator_params[...])
    self.assertEqual(params.shape, (2, 3, 4, 4, 4))  # [A, K, M, b, b]
    self.assertTrue(0.0 <= params.min() and params.max() < 2 * np.pi)  # U[0, 2 pi)
    self.assertGreater(params.max(), np.pi)
    module = liere_rotation.LieRERotation(16, 3, num_axes=2, block_size=4, variant="comrope_ld",
                                          rngs=nnx.Rngs(0))
    self.assertEqual(module.generator_params[...].shape, (3, 4, 4, 4))  # [K, M, b, b]
    self.assertEqual(module.multipliers[...].shape, (2, 4))  # [A, M], shared by the heads.
    self.assertLess(abs(float(jnp.std(module.generator_params[...])) - 1.0), 0.2)  # N(0, 1)

  def test_parameters_are_learned(self):
    module = liere_rotation.LieRERotation(8, 1, num_axes=2, block_size=4, variant="comrope_ld",
                                          init="rope", rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (4, 1, 8))
    positions = position_grids.image_positions(2, 2)
    grads = nnx.jit(nnx.grad(lambda m: jnp.sum(jnp.sin(3 * m(x, positions)))))(module)
    self.assertGreater(float(jnp.max(jnp.abs(grads.generator_params[...]))), 0.0)
    self.assertGreater(float(jnp.max(jnp.abs(grads.multipliers[...]))), 0.0)


class FailureModesTest(parameterized.TestCase):

  def test_bad_hyper_parameters_name_the_argument(self):
    cases = [
        (lambda: liere.skew_symmetric(jnp.zeros((3, 4))), "params"),
        (lambda: liere.skew_symmetric(jnp.zeros((4, 4), jnp.int32)), "params"),
        (lambda: liere.comrope_ap_generators(jnp.zeros((2, 4, 4)), num_axes=0), "num_axes"),
        (lambda: liere.comrope_ld_generators(jnp.zeros((2, 3, 4, 4)), jnp.zeros((2, 2))),
         "multipliers"),
        (lambda: liere.liere_rope_generators(16, block_size=3), "block_size"),
        (lambda: liere.liere_rope_generators(16, block_size=32), "block_size"),
        (lambda: liere.liere_rope_generators(16, block_size=8, num_axes=3), "num_axes"),
        (lambda: liere.liere_rope_generators(16, block_size=8, base=1.0), "base"),
        (lambda: liere.liere_rotations(jnp.zeros((3, 2)), jnp.zeros((3, 1, 4, 4))),
         "positions"),
        (lambda: liere.liere_rotations(jnp.zeros((3, 1)), jnp.zeros((1, 4, 4)),
                                       max_squarings=0), "max_squarings"),
        (lambda: liere.apply_liere(jnp.zeros((3, 4, 8)), jnp.zeros((3, 1)),
                                   jnp.zeros((1, 3, 2, 4, 4))), "rotations"),
        (lambda: liere.apply_liere(jnp.zeros((3, 4, 8)), jnp.zeros((3, 1)),
                                   jnp.zeros((1, 1, 3, 4, 4))), "rotations"),
        (lambda: liere.apply_liere(jnp.zeros((3, 4, 8)), jnp.zeros((3, 1)),
                                   jnp.zeros((1, 3, 4, 4))), "generators"),
        (lambda: liere.apply_liere(jnp.zeros((3, 4, 8)), jnp.zeros((3, 1), jnp.bfloat16),
                                   jnp.zeros((1, 1, 2, 4, 4))), "positions"),
        (lambda: liere_rotation.LieRERotation(8, 1, variant="rope", rngs=nnx.Rngs(0)),
         "variant"),
        (lambda: liere_rotation.LieRERotation(8, 1, block_size=1, rngs=nnx.Rngs(0)),
         "block_size"),
        (lambda: liere_rotation.LieRERotation(8, 1, block_size=3, init="rope",
                                              rngs=nnx.Rngs(0)), "block_size"),
        (lambda: liere_rotation.LieRERotation(8, 1, init="zeros", rngs=nnx.Rngs(0)), "init"),
        (lambda: liere_rotation.LieRERotation(8, 1, init_scale=0.0, rngs=nnx.Rngs(0)),
         "init_scale"),
    ]
    for call, name in cases:
      with self.assertRaisesRegex(ValueError, name):
        call()

  def test_module_checks_the_head_dim_of_x(self):
    module = liere_rotation.LieRERotation(8, 1, num_axes=2, block_size=4, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "head dim 8"):
      module(jnp.zeros((4, 1, 12)), position_grids.image_positions(2, 2))


if __name__ == "__main__":
  absltest.main()

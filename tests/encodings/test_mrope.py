"""Tests for pejax/encodings/mrope.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import mrope
from pejax.encodings import rope


def _hf_recomposed_angles(position_ids, inv_freq, sections):
  """Hugging Face Qwen2-VL: per-axis angles, then section i taken from axis i % 3."""
  freqs = np.asarray(position_ids, np.float32)[..., None] * np.asarray(inv_freq)  # [3, L, P]
  chunks = np.split(freqs, np.cumsum(sections)[:-1], axis=-1)
  return np.concatenate([chunk[i % 3] for i, chunk in enumerate(chunks)], axis=-1)


class PositionIdsTest(parameterized.TestCase):

  def test_text_image_text_golden(self):
    ids = mrope.mrope_position_ids([2, (1, 2, 3), 2])
    chex.assert_type(ids, jnp.int32)
    np.testing.assert_array_equal(ids, [[0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
                                        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
                                        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6]])

  def test_video_golden_resumes_at_max_plus_one(self):
    # Video T=3 > max(H, W)=2: the text after it starts at max id (1 + 2) + 1 = 4.
    ids = mrope.mrope_position_ids([1, (3, 2, 2), 1])
    np.testing.assert_array_equal(ids, [[0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4],
                                        [0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2, 4],
                                        [0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 4]])

  def test_leading_image_two_tuple_and_consecutive_blocks(self):
    ids = mrope.mrope_position_ids([(2, 2), (1, 1, 2), 1])
    np.testing.assert_array_equal(ids, [[0, 0, 0, 0, 2, 2, 4],
                                        [0, 0, 1, 1, 2, 2, 4],
                                        [0, 1, 0, 1, 2, 3, 4]])

  def test_time_interval(self):
    ids = mrope.mrope_position_ids([(3, 1, 1), 1], time_interval=2.5)
    # Temporal ids int(0 * 2.5), int(1 * 2.5), int(2 * 2.5) = 0, 2, 5.
    np.testing.assert_array_equal(ids, [[0, 2, 5, 6], [0, 0, 0, 6], [0, 0, 0, 6]])

  def test_text_only_is_arange(self):
    ids = mrope.mrope_position_ids([3, 4])
    np.testing.assert_array_equal(ids, np.broadcast_to(np.arange(7), (3, 7)))

  @parameterized.named_parameters(
      ("empty", []), ("zero_text", [0]), ("bad_grid", [2, (1, 0, 2)]), ("float", [2.0]),
      ("four_tuple", [(1, 1, 1, 1)]), ("not_a_list", 5))
  def test_bad_segments(self, segments):
    with self.assertRaisesRegex(ValueError, "segments"):
      mrope.mrope_position_ids(segments)

  def test_bad_time_interval(self):
    with self.assertRaisesRegex(ValueError, "time_interval"):
      mrope.mrope_position_ids([1], time_interval=0.0)


# Bit-exact claims (text-only M-RoPE == 1-D RoPE): XLA's unoptimized pipeline rounds the two
# programs differently (2e-7), so this class compiles with the full pipeline.
@pytest.mark.xla_optimized
class ApplyMropeTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_text_only_equals_1d_rope(self, layout):
    head_dim = 16
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(head_dim))
    ids = mrope.mrope_position_ids([5, 6])
    x = jax.random.normal(jax.random.key(0), (2, 11, 3, head_dim))
    out = self.variant(lambda x, p: mrope.apply_mrope(
        x, p, inv_freq, mrope_section=(2, 3, 3), layout=layout))(x, ids)
    expected = rope.apply_rope(x, ids[0], inv_freq, layout=layout)
    np.testing.assert_array_equal(out, expected)

  @chex.variants(with_jit=True, without_jit=True)
  def test_angles_match_hf_recomposition(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(32, base=10000.0))
    ids = mrope.mrope_position_ids([3, (2, 3, 4), 2, (1, 2, 2), 1])
    angles = self.variant(lambda p: mrope.mrope_angles(p, inv_freq, mrope_section=(4, 6, 6)))(ids)
    chex.assert_shape(angles, (ids.shape[1], 16))
    np.testing.assert_array_equal(angles, _hf_recomposed_angles(ids, inv_freq, (4, 6, 6)))

  def test_qwen2_vl_sections_head_dim_128(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(128, base=1000000.0))
    ids = mrope.mrope_position_ids([4, (1, 4, 6), 3])
    angles = np.asarray(mrope.mrope_angles(ids, inv_freq, mrope_section=[16, 24, 24]))
    np.testing.assert_array_equal(angles[:, :16], np.asarray(ids[0], np.float32)[:, None]
                                  * np.asarray(inv_freq[:16]))
    np.testing.assert_array_equal(angles[:, 16:40], np.asarray(ids[1], np.float32)[:, None]
                                  * np.asarray(inv_freq[16:40]))
    np.testing.assert_array_equal(angles[:, 40:], np.asarray(ids[2], np.float32)[:, None]
                                  * np.asarray(inv_freq[40:]))

  def test_image_scores_depend_only_on_thw_offsets(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(24, base=100.0))
    ids = mrope.mrope_position_ids([(2, 3, 3)])
    n = ids.shape[1]
    q = jnp.broadcast_to(jax.random.normal(jax.random.key(1), (24,)), (n, 1, 24))
    k = jnp.broadcast_to(jax.random.normal(jax.random.key(2), (24,)), (n, 1, 24))
    fn = lambda x: mrope.apply_mrope(x, ids, inv_freq, mrope_section=(4, 4, 4))[:, 0]
    scores = np.asarray(fn(q), np.float64) @ np.asarray(fn(k), np.float64).T
    pos = np.asarray(ids).T
    offsets = pos[:, None, :] - pos[None, :, :]
    for off in [(0, 0, 0), (1, 0, 0), (0, 1, -1), (-1, 2, 2), (1, -2, 0)]:
      sel = np.all(offsets == np.array(off), axis=-1)
      self.assertGreater(sel.sum(), 0)
      np.testing.assert_allclose(scores[sel], scores[sel][0], atol=2e-5)

  @pytest.mark.slow
  def test_batched_ids(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    ids = jnp.stack([mrope.mrope_position_ids([1, (1, 2, 2), 1]),
                     mrope.mrope_position_ids([6])], axis=1)  # [3, B=2, L=6]
    x = jax.random.normal(jax.random.key(3), (2, 6, 2, 8))
    out = mrope.apply_mrope(x, ids, inv_freq, mrope_section=(2, 1, 1))
    for b in range(2):
      chex.assert_trees_all_close(
          out[b], mrope.apply_mrope(x[b], ids[:, b], inv_freq, mrope_section=(2, 1, 1)))

  def test_errors(self):
    inv_freq, _ = rope.rope_inv_freq(rope.RopeConfig(8))
    ids = mrope.mrope_position_ids([4])
    x = jnp.ones((4, 1, 8))
    with self.assertRaisesRegex(ValueError, "mrope_section must sum to .* = 4"):
      mrope.apply_mrope(x, ids, inv_freq, mrope_section=(2, 2, 2))
    with self.assertRaisesRegex(ValueError, r"mrope_section must have one entry per position axis"):
      mrope.apply_mrope(x, ids, inv_freq, mrope_section=(2, 2))
    with self.assertRaisesRegex(ValueError, "mrope_section must contain non-negative"):
      mrope.apply_mrope(x, ids, inv_freq, mrope_section=(5, -1, 0))
    with self.assertRaisesRegex(ValueError, "position_ids must be an integer array"):
      mrope.apply_mrope(x, ids.astype(jnp.float32), inv_freq, mrope_section=(2, 1, 1))
    with self.assertRaisesRegex(ValueError, "position_ids"):
      mrope.apply_mrope(x, jnp.arange(4), inv_freq, mrope_section=(2, 1, 1))

"""Tests for the ALiBi-paper evaluation windows (pejax.data.eval_windows)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import eval_windows


def _tokens(n: int) -> np.ndarray:
  return np.random.default_rng(n).integers(0, 256, size=n).astype(np.uint8)


def _scored(batch) -> tuple[np.ndarray, np.ndarray]:
  """Scored targets in row-major (window) order, and the boolean `[N, L]` mask that picked them."""
  mask = batch["loss_mask"] > 0
  return batch["targets"][mask], mask


class NonoverlappingWindowsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # (name, T, L, max_tokens, expected N)
      ("exact", 65, 16, None, 4), ("remainder", 100, 16, None, 6), ("one_window", 17, 16, None, 1),
      ("capped", 1000, 16, 50, 3), ("cap_above_split", 100, 10, 10_000, 9))
  def test_each_token_scored_once(self, num_tokens, length, max_tokens, num_windows):
    tokens = _tokens(num_tokens)
    batch = eval_windows.nonoverlapping_windows(tokens, length, max_tokens=max_tokens)
    for key in ("inputs", "targets", "positions", "loss_mask"):
      self.assertEqual(batch[key].shape, (num_windows, length), key)
    self.assertEqual(batch["inputs"].dtype, np.int32)
    self.assertEqual(batch["loss_mask"].dtype, np.float32)
    scored, _ = _scored(batch)
    # Scored targets, in order, are exactly tokens[1 : N L + 1]: each once, none skipped.
    np.testing.assert_array_equal(scored, tokens[1:num_windows * length + 1])
    np.testing.assert_array_equal(batch["inputs"].reshape(-1), tokens[:num_windows * length])
    np.testing.assert_array_equal(batch["positions"][-1], np.arange(length))


class SlidingWindowsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # (name, T, L, S, max_tokens, expected N)
      ("stride_one", 40, 16, 1, None, 24), ("half", 100, 16, 8, None, 11),
      ("stride_equals_length", 100, 16, 16, None, 6), ("uneven", 100, 16, 5, None, 17),
      ("capped", 1000, 32, 8, 64, 5), ("one_window", 17, 16, 4, None, 1))
  def test_each_token_scored_once_with_context(self, num_tokens, length, stride, max_tokens,
                                               num_windows):
    tokens = _tokens(num_tokens)
    batch = eval_windows.sliding_windows(tokens, length, stride=stride, max_tokens=max_tokens)
    for key in ("inputs", "targets", "positions", "loss_mask"):
      self.assertEqual(batch[key].shape, (num_windows, length), key)
    scored, mask = _scored(batch)
    covered = length + (num_windows - 1) * stride
    np.testing.assert_array_equal(scored, tokens[1:covered + 1])
    # Window k reads tokens[kS : kS + L]; every scored column after row 0 has >= L - S context.
    for k in range(num_windows):
      np.testing.assert_array_equal(batch["inputs"][k], tokens[k * stride:k * stride + length])
      columns = np.flatnonzero(mask[k])
      if k:
        self.assertGreaterEqual(columns.min(), length - stride)
    self.assertEqual(mask[0].sum(), length)

  def test_stride_equal_to_length_matches_nonoverlapping(self):
    tokens = _tokens(333)
    sliding = eval_windows.sliding_windows(tokens, 20, stride=20)
    disjoint = eval_windows.nonoverlapping_windows(tokens, 20)
    for key in sliding:
      np.testing.assert_array_equal(sliding[key], disjoint[key], err_msg=key)


class WindowErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(("nonoverlapping", None), ("sliding", 4))
  def test_split_shorter_than_one_window(self, stride):
    tokens = _tokens(100)
    with self.assertRaisesRegex(ValueError, r"tokens has 100 tokens.*length \+ 1 = 129"):
      if stride is None:
        eval_windows.nonoverlapping_windows(tokens, 128)
      else:
        eval_windows.sliding_windows(tokens, 128, stride=stride)

  @parameterized.named_parameters(
      ("max_tokens_below_length", dict(length=16, stride=4, max_tokens=8), "max_tokens"),
      ("stride_zero", dict(length=16, stride=0), "stride"),
      ("stride_above_length", dict(length=16, stride=17), "stride must be <= length"),
      ("zero_length", dict(length=0, stride=1), "length"))
  def test_bad_arguments(self, kwargs, pattern):
    with self.assertRaisesRegex(ValueError, pattern):
      eval_windows.sliding_windows(_tokens(100), **kwargs)

  def test_tokens_must_be_1d_integers(self):
    with self.assertRaisesRegex(ValueError, "tokens must be a 1-D integer array"):
      eval_windows.nonoverlapping_windows(np.zeros((4, 50), np.int32), 8)
    with self.assertRaisesRegex(ValueError, "tokens must be a 1-D integer array"):
      eval_windows.nonoverlapping_windows(np.zeros(50, np.float32), 8)


if __name__ == "__main__":
  absltest.main()

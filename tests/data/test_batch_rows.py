"""Per-process loading: an iterator told its rows yields exactly those rows of each global batch."""

from __future__ import annotations

from unittest import mock

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import language_model
from pejax.data import synthetic


def _make(kind: str):
  if kind == "language_model":
    tokens = np.random.default_rng(123).integers(0, 256, size=5000).astype(np.uint8)
    return language_model.LanguageModelIterator(tokens, batch_size=8, seq_len=32, seed=3)
  return synthetic.SyntheticTaskIterator(kind, batch_size=8, seq_len=96, seed=3)


class SelectRowsTest(parameterized.TestCase):

  @parameterized.parameters("language_model", "copy", "addition")
  def test_rows_are_those_of_the_global_batch_and_the_state_counts_global_batches(self, kind):
    whole, part = _make(kind), _make(kind)
    part.select_rows(slice(4, 8))
    for _ in range(3):
      global_batch, local = next(whole), next(part)
      for key, value in global_batch.items():
        self.assertEqual(local[key].shape, (4,) + value.shape[1:], key)
        np.testing.assert_array_equal(local[key], value[4:8], err_msg=key)
    self.assertEqual(part.get_state(), whole.get_state())
    self.assertEqual(part.rows, slice(4, 8))

  def test_corpus_iterator_reads_only_its_windows(self):
    it = _make("language_model")
    it.select_rows(slice(0, 2))
    with mock.patch.object(it, "batch_at", side_effect=AssertionError("read the whole batch")):
      batch = next(it)
    self.assertEqual(batch["inputs"].shape, (2, 32))

  def test_none_restores_whole_batches(self):
    it = _make("language_model")
    it.select_rows(slice(2, 4))
    it.select_rows(None)
    self.assertEqual(next(it)["inputs"].shape, (8, 32))

  @parameterized.parameters(slice(0, 9), slice(4, 4), slice(0, 8, 2), slice(-2, None))
  def test_bad_rows_name_the_batch_size(self, rows):
    it = _make("language_model")
    with self.assertRaisesRegex(ValueError, "batch_size=8"):
      it.select_rows(rows)


if __name__ == "__main__":
  absltest.main()

"""Tests for next-byte language-model batches (pejax.data.language_model)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import language_model


def _tokens(n: int = 5000) -> np.ndarray:
  return np.random.default_rng(123).integers(0, 256, size=n).astype(np.uint8)


class LanguageModelIteratorTest(parameterized.TestCase):

  def test_windows_are_shifted_slices_of_the_tokens(self):
    tokens = _tokens(300)
    iterator = language_model.LanguageModelIterator(tokens, batch_size=64, seq_len=16, seed=0)
    batch = next(iterator)
    text = tokens.tobytes()
    for inputs, targets in zip(batch["inputs"], batch["targets"]):
      window = bytes(inputs.astype(np.uint8)) + bytes([targets[-1]])
      np.testing.assert_array_equal(inputs[1:], targets[:-1])
      self.assertIn(window, text)
    np.testing.assert_array_equal(batch["loss_mask"], 1.0)

  def test_window_starts_cover_both_ends(self):
    tokens = np.arange(10, dtype=np.int32)  # 10 tokens, L = 8: starts 0 and 1 only.
    iterator = language_model.LanguageModelIterator(tokens, batch_size=64, seq_len=8, seed=0)
    self.assertEqual(set(next(iterator)["inputs"][:, 0].tolist()), {0, 1})

  @parameterized.named_parameters(
      ("too_short", np.zeros(8, np.uint8), "fewer than one training window"),
      ("float_tokens", np.zeros(100, np.float32), "integer"),
      ("two_dims", np.zeros((10, 10), np.uint8), "1-D"))
  def test_bad_tokens(self, tokens, pattern):
    with self.assertRaisesRegex(ValueError, pattern):
      language_model.LanguageModelIterator(tokens, batch_size=2, seq_len=8, seed=0)

  @parameterized.named_parameters(("seed", {"seed": -1}, "seed"),
                                  ("batch_size", {"batch_size": 0}, "batch_size"),
                                  ("seq_len", {"seq_len": 0}, "seq_len"))
  def test_bad_hyper_parameters(self, change, pattern):
    kwargs = {"batch_size": 2, "seq_len": 8, "seed": 0, **change}
    with self.assertRaisesRegex(ValueError, pattern):
      language_model.LanguageModelIterator(_tokens(), **kwargs)


if __name__ == "__main__":
  absltest.main()

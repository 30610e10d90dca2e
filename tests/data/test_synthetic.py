"""Tests for synthetic task batches by name (pejax.data.synthetic)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import synthetic
from pejax.data import synthetic_example


class SyntheticBatchTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("copy", "copy", {}), ("reverse", "reverse", {}), ("passkey", "passkey", {}),
      ("passkey_fixed_depth", "passkey", {"depth": 0.3}), ("addition", "addition", {}),
      ("addition_reversed", "addition", {"reverse_digits": True}))
  def test_loss_mask_covers_exactly_the_answer(self, task, options):
    seq_len = 96
    examples = synthetic.synthetic_examples(task, 0, batch_size=8, seq_len=seq_len, **options)
    batch = synthetic_example.encode_examples(examples, seq_len=seq_len)
    for b, example in enumerate(examples):
      self.assertEqual(synthetic.solve(task, example.prompt, **options), example.answer)
      self.assertEqual(synthetic.masked_bytes(batch["targets"][b], batch["loss_mask"][b]),
                       example.answer)
      # The answer byte is the target of the position holding the previous byte.
      start = len(example.prompt) - 1
      self.assertEqual(batch["loss_mask"][b, start], 1.0)
      self.assertEqual(batch["loss_mask"][b].sum(), len(example.answer))
      text = example.text
      np.testing.assert_array_equal(batch["inputs"][b, :len(text) - 1], list(text[:-1]))
      np.testing.assert_array_equal(batch["targets"][b, :len(text) - 1], list(text[1:]))
      self.assertTrue(np.all(batch["targets"][b, len(text) - 1:] == synthetic_example.PAD_ID))
      self.assertTrue(np.all(batch["loss_mask"][b, len(text) - 1:] == 0.0))
    np.testing.assert_array_equal(
        synthetic.synthetic_batch(task, 0, batch_size=8, seq_len=seq_len, **options)["inputs"],
        batch["inputs"])

  @parameterized.named_parameters(("copy", "copy", 63), ("reverse", "reverse", 63),
                                  ("addition", "addition", 41), ("passkey", "passkey", 129))
  def test_max_size_is_the_largest_that_fits(self, task, expected):
    self.assertEqual(synthetic.max_size_for(task, 128), expected)
    examples = synthetic.synthetic_examples(task, 1, batch_size=4, seq_len=128,
                                            min_size=expected, max_size=expected)
    self.assertLessEqual(max(len(e.text) for e in examples), 129)
    with self.assertRaisesRegex(ValueError, "does not fit seq_len 128"):
      synthetic.synthetic_examples(task, 1, batch_size=4, seq_len=128, max_size=expected + 1)

  def test_sizes_stay_in_range(self):
    examples = synthetic.synthetic_examples("copy", 0, batch_size=200, seq_len=64, min_size=5,
                                            max_size=9)
    lengths = {len(e.answer) for e in examples}
    self.assertEqual(lengths, {5, 6, 7, 8, 9})

  def test_longer_test_lengths(self):
    # Train up to size 20 at L = 48, test at size 200 with a longer L.
    batch = synthetic.synthetic_batch("reverse", 0, batch_size=2, seq_len=512, min_size=200,
                                      max_size=200)
    self.assertEqual(batch["loss_mask"].sum(axis=1).tolist(), [200.0, 200.0])

  @parameterized.named_parameters(
      ("unknown_task", "sort", {}, "task must be one of"),
      ("unknown_option", "copy", {"depth": 0.5}, "unknown"),
      ("empty_range", "copy", {"min_size": 9, "max_size": 5}, "min_size must be <= max_size"),
      ("too_short_seq", "passkey", {"seq_len": 50}, "seq_len 50 is too short"),
      ("min_below_task_minimum", "passkey", {"min_size": 10}, "min_size"))
  def test_bad_arguments(self, task, kwargs, pattern):
    kwargs = {"seq_len": 128, **kwargs}
    with self.assertRaisesRegex(ValueError, pattern):
      synthetic.synthetic_batch(task, 0, batch_size=2, **kwargs)


if __name__ == "__main__":
  absltest.main()

"""Tests for encoding synthetic examples as padded rows (pejax.data.synthetic_example)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import synthetic
from pejax.data import synthetic_example


class EncodeExamplesTest(parameterized.TestCase):

  def test_golden_row(self):
    example = synthetic_example.SyntheticExample(prompt=b"ab=", answer=b"ab", suffix=b"\n")
    batch = synthetic_example.encode_examples([example], seq_len=8)
    np.testing.assert_array_equal(batch["inputs"][0], list(b"ab=ab\n") + [0, 0])
    np.testing.assert_array_equal(batch["targets"][0], list(b"b=ab\n") + [0, 0, 0])
    np.testing.assert_array_equal(batch["loss_mask"][0], [0, 0, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch["positions"][0], np.arange(8))
    self.assertEqual(batch["inputs"].dtype, np.int32)
    self.assertEqual(batch["loss_mask"].dtype, np.float32)

  def test_exact_fit_and_overflow(self):
    example = synthetic_example.SyntheticExample(prompt=b"abc=", answer=b"abc", suffix=b"\n")
    batch = synthetic_example.encode_examples([example], seq_len=7)  # 8 bytes fill 7 positions.
    self.assertEqual(synthetic.masked_bytes(batch["targets"][0], batch["loss_mask"][0]), b"abc")
    with self.assertRaisesRegex(ValueError, "example 0 has 8 bytes, more than seq_len"):
      synthetic_example.encode_examples([example], seq_len=6)


if __name__ == "__main__":
  absltest.main()

"""Tests for the copy and reverse tasks (pejax.data.copy_reverse)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import copy_reverse


class CopyReverseTest(parameterized.TestCase):

  @parameterized.parameters(1, 7, 50)
  def test_copy_answer_equals_source(self, length):
    example = copy_reverse.copy_example(np.random.default_rng(length), length=length)
    source = example.info["source"]
    self.assertLen(source, length)
    self.assertEqual(example.text, source + b"=" + source + b"\n")
    self.assertEqual(example.answer, source)
    self.assertTrue(set(source) <= set(copy_reverse.LOWERCASE))

  @parameterized.parameters(1, 8, 33)
  def test_reverse_answer_is_reversed_source(self, length):
    example = copy_reverse.reverse_example(length, length=length)
    source = example.info["source"]
    self.assertEqual(example.prompt, source + b"=")
    self.assertEqual(example.answer, bytes(reversed(source)))
    self.assertEqual(copy_reverse.solve_reverse(example.prompt), example.answer)
    self.assertEqual(copy_reverse.solve_copy(example.prompt), source)

  def test_custom_alphabet(self):
    example = copy_reverse.copy_example(0, length=200, alphabet=b"01")
    self.assertEqual(set(example.answer), set(b"01"))

  def test_same_seed_same_example(self):
    self.assertEqual(copy_reverse.copy_example(3, length=20),
                     copy_reverse.copy_example(3, length=20))
    self.assertNotEqual(copy_reverse.copy_example(3, length=20),
                        copy_reverse.copy_example(4, length=20))

  @parameterized.named_parameters(
      ("zero_length", dict(length=0), "length"),
      ("separator_in_alphabet", dict(length=3, alphabet=b"ab="), "alphabet"),
      ("empty_alphabet", dict(length=3, alphabet=b""), "alphabet"))
  def test_bad_arguments(self, kwargs, pattern):
    with self.assertRaisesRegex(ValueError, pattern):
      copy_reverse.copy_example(0, **kwargs)


if __name__ == "__main__":
  absltest.main()

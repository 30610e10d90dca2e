"""Tests for the addition task (pejax.data.addition)."""

from __future__ import annotations

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import addition


class AdditionTest(parameterized.TestCase):

  @parameterized.product(num_digits=(1, 3, 12, 40), reverse_digits=(False, True))
  def test_answer_is_the_sum(self, num_digits, reverse_digits):
    rng = np.random.default_rng(num_digits)
    for _ in range(20):
      example = addition.addition_example(rng, num_digits=num_digits,
                                          reverse_digits=reverse_digits)
      a_text, b_text = example.prompt[:-1].split(b"+")
      order = (lambda t: t[::-1]) if reverse_digits else (lambda t: t)
      a, b = int(order(a_text)), int(order(b_text))
      self.assertEqual(int(order(example.answer)), a + b)
      self.assertEqual((a, b, a + b), (example.info["a"], example.info["b"], example.info["c"]))
      self.assertLen(a_text, num_digits)
      self.assertLen(b_text, num_digits)
      self.assertTrue(example.prompt.endswith(b"="))
      self.assertEqual(example.suffix, b"\n")

  def test_golden_solver(self):
    self.assertEqual(addition.solve_addition(b"57+68="), b"125")
    # Reversed digits: "57" is 75 and "68" is 86; 75 + 86 = 161 is written "161".
    self.assertEqual(addition.solve_addition(b"57+68=", reverse_digits=True), b"161")
    # 19 + 1 = 20, least-significant first: "91" + "1" = "02".
    self.assertEqual(addition.solve_addition(b"91+1=", reverse_digits=True), b"02")
    with self.assertRaisesRegex(ValueError, "prompt"):
      addition.solve_addition(b"5-6=")

  def test_operands_have_no_leading_zero(self):
    rng = np.random.default_rng(0)
    for _ in range(200):
      example = addition.addition_example(rng, num_digits=2)
      self.assertGreaterEqual(example.info["a"], 10)
      self.assertGreaterEqual(example.info["b"], 10)

  def test_bad_num_digits(self):
    with self.assertRaisesRegex(ValueError, "num_digits"):
      addition.addition_example(0, num_digits=0)


if __name__ == "__main__":
  absltest.main()

"""The Delétang et al. / Ruoss et al. tasks: golden answers, solver agreement, sizes, errors."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from pejax.data import ruoss_tasks
from pejax.data import synthetic
from pejax.data import synthetic_example


class RuossTasksTest(parameterized.TestCase):

  @parameterized.parameters(*ruoss_tasks.TASKS)
  def test_solver_agrees_with_generator_and_text_fits(self, task):
    rng = np.random.default_rng(0)
    for seq_len in (16, 41, 100):
      lo, hi = synthetic.get_task(task).size_range(seq_len)
      for size in (lo, hi, (lo + hi) // 2):
        for _ in range(20):
          example = synthetic.get_task(task).generate(rng, size)
          self.assertEqual(ruoss_tasks.solve(task, example.prompt), example.answer)
          self.assertLessEqual(len(example.text), seq_len + 1, (task, size))
          self.assertNotIn(synthetic_example.PAD_ID, example.text)

  def test_binary_addition_golden(self):
    # x = 001 (lsb first: 4), y = 11 (3); 7 = 111 in max(3, 2) + 1 = 4 bits: 1110.
    self.assertEqual(ruoss_tasks.solve("binary_addition", b"001+11="), b"1110")
    self.assertEqual(ruoss_tasks.solve("binary_addition", b"1+1="), b"01")
    rng = np.random.default_rng(1)
    for _ in range(50):
      e = ruoss_tasks.binary_addition_example(rng, length=9)
      x, y = e.prompt[:-1].split(b"+")
      value = lambda bits: int(bits[::-1], 2)
      self.assertEqual(value(e.answer), value(x) + value(y))
      self.assertEqual(len(x) + len(y) + 1, 9)

  def test_bucket_sort_and_stack_golden(self):
    self.assertEqual(ruoss_tasks.solve("bucket_sort", b"3102=",), b"0123")
    # Stack 01 (top 1); push 1, pop, pop, push 0 -> 00 top first, then $.
    self.assertEqual(ruoss_tasks.solve("stack_manipulation", b"01|bppa="), b"00$")
    # Pops on an empty stack do nothing.
    self.assertEqual(ruoss_tasks.solve("stack_manipulation", b"1|pppb="), b"1$")

  def test_other_goldens(self):
    self.assertEqual(ruoss_tasks.solve("odds_first", b"abcde="), b"acebd")
    self.assertEqual(ruoss_tasks.solve("parity", b"1011="), b"1")
    self.assertEqual(ruoss_tasks.solve("cycle_navigation", b"<<.="), b"3")
    self.assertEqual(ruoss_tasks.solve("missing_duplicate", b"01_011="), b"1")
    self.assertEqual(ruoss_tasks.solve("duplicate_string", b"10="), b"1010")

  def test_bad_input_names_the_argument(self):
    with self.assertRaisesRegex(ValueError, "length of stack_manipulation must be >= 2"):
      ruoss_tasks.stack_manipulation_example(0, length=1)
    with self.assertRaisesRegex(ValueError, "length of binary_addition must be >= 3"):
      ruoss_tasks.binary_addition_example(0, length=2)
    with self.assertRaisesRegex(ValueError, "task must be one of"):
      ruoss_tasks.solve("nope", b"01=")
    with self.assertRaisesRegex(ValueError, "prompt must be"):
      ruoss_tasks.solve("parity", b"01")


if __name__ == "__main__":
  absltest.main()

"""Flip-flop, MQAR, selective copy, counting, digit sorting / summation: answers and scoring."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from pejax.data import associative_recall
from pejax.data import cope_tasks
from pejax.data import flip_flop
from pejax.data import nope_tasks
from pejax.data import synthetic
from pejax.data import synthetic_example

TASKS = ("flip_flop", "mqar", "selective_copy", "count_symbol", "count_increments", "sort_digits",
         "sum_digits")


class ContentTasksTest(parameterized.TestCase):

  @parameterized.parameters(*TASKS)
  def test_registered_solver_agrees_and_text_fits(self, task):
    rng = np.random.default_rng(0)
    spec = synthetic.get_task(task)
    for seq_len in (24, 101):
      lo, hi = spec.size_range(seq_len)
      for size in (lo, hi):
        for _ in range(20):
          e = spec.generate(rng, size)
          self.assertLessEqual(len(e.text), seq_len + 1, (task, size))
          if e.scored is None:
            self.assertEqual(synthetic.solve(task, e.prompt), e.answer)
          else:
            scored = bytes(c for c, m in zip(e.answer, e.scored) if m)
            self.assertEqual(synthetic.solve(task, e.text), scored)

  def test_flip_flop_scores_only_read_bits(self):
    e = flip_flop.flip_flop_example(3, length=30, ignore_prob=0.5)
    self.assertTrue(e.text.startswith(b"w") and e.text.rstrip(b"\n")[-2:-1] == b"r")
    batch = synthetic_example.encode_examples([e], seq_len=64)
    mask = batch["loss_mask"][0] > 0
    inputs = batch["inputs"][0]
    # Each scored target is the bit after an 'r' opcode (the input at that row).
    self.assertTrue(np.all(inputs[mask] == ord("r")))
    self.assertEqual(int(mask.sum()), e.text.count(b"r"))
    self.assertEqual(flip_flop.solve(b"w1i0r1w0r0"), b"10")

  def test_mqar_scores_values_and_queries_every_key_once(self):
    e = associative_recall.mqar_example(0, length=12)
    context, queries = e.text.rstrip(b"\n").split(b"|")
    self.assertEqual(sorted(queries[0::2]), sorted(context[0::2]))
    self.assertEqual(len(set(context[0::2])), 12)
    self.assertEqual(associative_recall.solve(b"a1b2|b2a1"), b"21")
    with self.assertRaisesRegex(ValueError, "length of mqar must be <= 52"):
      associative_recall.mqar_example(0, length=53)

  def test_goldens(self):
    self.assertEqual(cope_tasks.solve("selective_copy", b"..a.b..c="), b"abc")
    self.assertEqual(cope_tasks.solve("count_symbol", b"abcaab?a="), b"3")
    self.assertEqual(nope_tasks.solve("sort_digits", b"3912="), b"1239")
    self.assertEqual(nope_tasks.solve("sum_digits", b"999="), b"7")

  def test_scored_must_match_the_answer(self):
    with self.assertRaisesRegex(ValueError, "scored must have one entry per answer byte"):
      synthetic_example.SyntheticExample(b"a", b"bc", scored=(True,))


if __name__ == "__main__":
  absltest.main()

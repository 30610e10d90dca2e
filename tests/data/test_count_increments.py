"""Golovneva et al.'s counting task (``cope_tasks.count_increments_example``): its distribution
against the CoPE authors' generator, its answers, and its bad inputs.

The reference statistics (``cope_counting_reference.json``) come from the authors' own generator
(``tests/golden/make_cope_counting_stats.py``: 20000 programs per case); here 1500 programs per
case are compared with them, each proportion and mean within 5 standard errors of the
difference (about 60 comparisons: a false alarm has probability ~1e-5).
"""

import json
import math
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from pejax.data import cope_tasks
from pejax.data import synthetic

REFERENCE = json.loads((pathlib.Path(__file__).parent / "cope_counting_reference.json").read_text())
SAMPLES = 1500
Z = 5.0


def _statements(prompt: bytes) -> list:
  program = prompt[:prompt.index(cope_tasks.QUERY)]
  out, i = [], 0
  while i < len(program):
    step = 1 if program[i:i + 1] == cope_tasks.NO_OP else 2
    out.append(program[i:i + step])
    i += step
  return out


def _statistics(*, variables: int, length: int, seed: int) -> dict:
  rng = np.random.default_rng(seed)
  answers = np.zeros(REFERENCE["max_value"] + 1, int)
  distinct = np.zeros(variables + 1, int)
  counts = {"set": [], "increment": [], "pass": []}
  for _ in range(SAMPLES):
    e = cope_tasks.count_increments_example(rng, length=length, num_variables=variables)
    statements = _statements(e.prompt)
    assert len(statements) == length
    answers[int(e.answer)] += 1
    sets = [s for s in statements if s.endswith(cope_tasks.RESET)]
    distinct[len({s[:1] for s in sets})] += 1
    counts["set"].append(len(sets))
    counts["increment"].append(sum(s.endswith(cope_tasks.INCREMENT) for s in statements))
    counts["pass"].append(statements.count(cope_tasks.NO_OP))
  return {"answers": answers, "distinct_variables_set": distinct,
          "statements_mean_std": {k: (np.mean(v), np.std(v, ddof=1)) for k, v in counts.items()}}


class DistributionTest(parameterized.TestCase):
  """Each case of the reference file: the same histograms and statement counts."""

  @parameterized.parameters(*[(c["variables"], c["length"]) for c in REFERENCE["cases"]])
  def test_matches_the_authors_generator(self, variables, length):
    ref = next(c for c in REFERENCE["cases"]
               if (c["variables"], c["length"]) == (variables, length))
    mine = _statistics(variables=variables, length=length, seed=variables * 1000 + length)
    n_ref = ref["samples"]
    for key in ("answers", "distinct_variables_set"):
      for value, (a, b) in enumerate(zip(ref[key], mine[key])):
        p_ref, p_mine = a / n_ref, b / SAMPLES
        p = (a + b) / (n_ref + SAMPLES)
        se = math.sqrt(max(p * (1 - p), 1.0 / SAMPLES) * (1 / n_ref + 1 / SAMPLES))
        self.assertLessEqual(abs(p_ref - p_mine), Z * se,
                             f"{key}[{value}]: reference {p_ref:.4f}, pejax {p_mine:.4f}")
    for kind, (mean_ref, std_ref) in ref["statements_mean_std"].items():
      mean, std = mine["statements_mean_std"][kind]
      se = math.sqrt(std_ref ** 2 / n_ref + std ** 2 / SAMPLES) + 1e-9
      self.assertLessEqual(abs(mean - mean_ref), Z * se,
                           f"{kind} statements: reference {mean_ref:.3f}, pejax {mean:.3f}")


class AnswerTest(parameterized.TestCase):

  def test_goldens(self):
    self.assertEqual(cope_tasks.solve("count_increments", b"a0.a+b0a+..b+?a="), b"2")
    self.assertEqual(cope_tasks.solve("count_increments", b"a0.a+b0a+..b+?b="), b"1")
    # A reset clears the count: only the increments after the last one count.
    self.assertEqual(cope_tasks.solve("count_increments", b"a0a+a+a+a0a+?a="), b"1")

  def test_answer_is_the_increments_since_the_last_reset(self):
    rng = np.random.default_rng(3)
    for length in (1, 2, 5, 40, 300):
      for _ in range(30):
        e = cope_tasks.count_increments_example(rng, length=length, num_variables=4)
        body = e.prompt[:-1]
        program, var = body[:-2], body[-1:]
        statements = _statements(e.prompt)
        self.assertLen(statements, length)
        last_reset = max(i for i, s in enumerate(statements) if s == var + cope_tasks.RESET)
        expected = statements[last_reset:].count(var + cope_tasks.INCREMENT)
        self.assertEqual(e.answer, str(expected).encode(), program)
        self.assertEqual(cope_tasks.solve("count_increments", e.prompt), e.answer)
        self.assertLessEqual(len(e.text), 2 * length + 6)

  def test_values_stay_within_max_value_and_variables_within_the_first_k(self):
    rng = np.random.default_rng(0)
    for _ in range(50):
      e = cope_tasks.count_increments_example(rng, length=200, num_variables=2, max_value=3)
      self.assertLessEqual(int(e.answer), 3)
      program = e.prompt[:e.prompt.index(cope_tasks.QUERY)]
      self.assertLessEqual(set(program) - set(b".+0"), set(b"ab"))
      values = {}
      for s in _statements(e.prompt):
        if s.endswith(cope_tasks.RESET):
          values[s[:1]] = 0
        elif s.endswith(cope_tasks.INCREMENT):
          self.assertIn(s[:1], values)  # Never an increment before the variable's reset.
          values[s[:1]] += 1
          self.assertLessEqual(values[s[:1]], 3)

  def test_same_seed_same_example(self):
    a = cope_tasks.count_increments_example(7, length=50, num_variables=5)
    b = cope_tasks.count_increments_example(7, length=50, num_variables=5)
    self.assertEqual(a, b)
    self.assertNotEqual(a, cope_tasks.count_increments_example(8, length=50, num_variables=5))

  def test_registered_with_its_options_and_size_range(self):
    task = synthetic.get_task("count_increments")
    self.assertEqual(task.size_range(64), (1, 29))  # 2n + 6 <= 64 + 1
    e = task.generate(0, 29, num_variables=5, max_value=99)
    self.assertLessEqual(len(e.text), 65)
    self.assertEqual(synthetic.solve("count_increments", e.prompt), e.answer)

  @parameterized.parameters(
      ({"length": 0}, "length"), ({"length": 2.5}, "length"), ({"length": True}, "length"),
      ({"length": 5, "num_variables": 0}, "num_variables"),
      ({"length": 5, "num_variables": 27}, "num_variables must be in 1..26, got 27"),
      ({"length": 5, "max_value": 0}, "max_value"),
      ({"length": 5, "max_value": 100}, "max_value must be in 1..99 .a two-digit answer., got 100"))
  def test_bad_arguments_name_the_argument(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      cope_tasks.count_increments_example(0, **kwargs)

  @parameterized.parameters(
      (b"a0a+?a", "must end with '='"), (b"a0a+?=", "ends with '\\?<variable>='"),
      (b"a0x?a=", "malformed count_increments statement"),
      (b"a+a0?a=", "increment of 'a' before its reset"),
      (b"a0..?b=", "queried variable 'b' is never reset"))
  def test_malformed_prompts_are_rejected(self, prompt, message):
    with self.assertRaisesRegex(ValueError, message):
      cope_tasks.solve("count_increments", prompt)


if __name__ == "__main__":
  absltest.main()

"""Regenerates ``tests/data/cope_counting_reference.json``: statistics of the CoPE authors' counting data.

Not run by the test suite. The reference is ``projects/cope/scripts/count_data_gen.py`` of
facebookresearch/RAM, commit 42a13702952ceb2aad74c087c659ca9a404ab1fa (Golovneva et al. 2024,
arXiv:2405.18719, the counting task): standard-library Python, so any ``python3`` runs it. To reproduce::

    git clone https://github.com/facebookresearch/RAM /tmp/RAM
    git -C /tmp/RAM checkout 42a13702952ceb2aad74c087c659ca9a404ab1fa
    python3 tests/golden/make_cope_counting_stats.py \\
        /tmp/RAM/projects/cope/scripts/count_data_gen.py > tests/data/cope_counting_reference.json

The reference draws a program length in [3, max_steps] and draws the whole sample again (length
included) when no variable was set; pejax's ``count_increments_example`` takes the length as
given. So that the two are compared at the same length, the script gives the reference module a
``random`` whose ``randint`` returns the length of the case (every other draw is Python's
``random``, seeded): the reference's own functions then generate programs of exactly that
length, redrawn at that length when no variable was set, as pejax does.

Per case (variables, length): the answer's histogram (0..10), the histogram of how many distinct
variables were set, and the mean and standard deviation over programs of the number of set,
increment and ``pass`` statements.
"""

import argparse
import importlib.util
import json
import math
import random
import sys

SAMPLES = 20000
CASES = [(3, 8), (3, 32), (3, 96), (5, 32), (5, 96)]  # (variables, program length)


class _FixedLength:
  """Python's ``random`` module, except that ``randint`` returns the case's length."""

  def __init__(self, length: int, rng: random.Random):
    self.length, self._rng = length, rng

  def randint(self, a, b):  # The reference's only randint: the program length.
    del a, b
    return self.length

  def __getattr__(self, name):
    return getattr(self._rng, name)


def _moments(values):
  mean = sum(values) / len(values)
  return [mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))]


def case(reference, *, variables: int, length: int, seed: int) -> dict:
  reference.random = _FixedLength(length, random.Random(seed))
  reference.args = argparse.Namespace(max_steps=length)  # Read as a global by the reference.
  answers = [0] * (reference.MAX_VAL + 1)
  distinct = [0] * (variables + 1)
  counts = {"set": [], "increment": [], "pass": []}
  for _ in range(SAMPLES):
    sample = reference.generate_sample(variables)
    statements = sample["context"].split(";")
    statements = [s.strip() for s in statements if s.strip()]
    assert len(statements) == length, (len(statements), length)
    answers[int(sample["answer"])] += 1
    sets = [s for s in statements if s.endswith("= 0")]
    distinct[len({s.split()[0] for s in sets})] += 1
    counts["set"].append(len(sets))
    counts["increment"].append(sum(s.endswith("++") for s in statements))
    counts["pass"].append(sum(s == "pass" for s in statements))
  return {"variables": variables, "length": length, "samples": SAMPLES, "answers": answers,
          "distinct_variables_set": distinct,
          "statements_mean_std": {k: _moments(v) for k, v in counts.items()}}


def main(path: str) -> None:
  spec = importlib.util.spec_from_file_location("count_data_gen", path)
  reference = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(reference)
  cases = [case(reference, variables=v, length=n, seed=i) for i, (v, n) in enumerate(CASES)]
  json.dump({"reference": "facebookresearch/RAM projects/cope/scripts/count_data_gen.py @ "
                          "42a13702952ceb2aad74c087c659ca9a404ab1fa",
             "max_value": reference.MAX_VAL,
             "weights_set_pass_increment": [reference.OP_WEIGHTS[op] for op in (
                 reference.Ops.SET, reference.Ops.DUMMY, reference.Ops.INCREMENT)],
             "cases": cases}, sys.stdout, indent=1)
  sys.stdout.write("\n")


if __name__ == "__main__":
  main(sys.argv[1])

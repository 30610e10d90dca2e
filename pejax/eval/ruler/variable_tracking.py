"""Variable tracking (vt): multi-hop tracing of chained assignments through noise.

A chain is ``VAR AAAAA = 12345``, ``VAR BBBBB = VAR AAAAA``, ... (``num_hops`` copies after the
first assignment, 5-letter upper-case names, a 5-digit value); its lines go, in order, at random
lines of RULER's noise haystack. ``num_chains`` chains with distinct values are inserted one after
another; the query is the first chain's value and the answer every one of its ``num_hops + 1``
variables. ``num_shots`` in-context examples precede the task (RULER adds one): the same task with
3-letter names, at most 10 hops and ``shot_haystack_size`` noise lines, followed by its answer.

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER,
  scripts/data/synthetic/variable_tracking.py).
"""

from __future__ import annotations

import string
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

import numpy as np

from pejax.eval.ruler import haystack as haystack_lib
from pejax.eval.ruler import task_spec

_TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following "
             "text.\n\n{context}\nQuestion: Find all variables that are assigned the value "
             "{query} in the text above.")
_ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, "
                  "{num_v} variables are assigned the value {query}, they are: ")
_NAME_LETTERS = 5
_SHOT_NAME_LETTERS = 3
_SHOT_MAX_HOPS = 10
_VALUE_LOW, _VALUE_HIGH = 10000, 99999  # RULER's np.random.randint(10000, 99999): exclusive.


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
  """Validates the variable-tracking options.

  Args:
    options: ``num_chains`` and ``num_hops`` (>= 1), ``num_shots`` (>= 0),
      ``shot_haystack_size`` (>= the lines of a shot's chain, ``min(num_hops, 10) + 1``).

  Returns:
    The options as ``int``.

  Raises:
    ValueError: naming the bad option and its value.
  """
  options = dict(options)
  options["num_chains"] = task_spec.check_int("num_chains", options["num_chains"], minimum=1)
  options["num_hops"] = task_spec.check_int("num_hops", options["num_hops"], minimum=1)
  options["num_shots"] = task_spec.check_int("num_shots", options["num_shots"], minimum=0)
  shot_lines = min(options["num_hops"], _SHOT_MAX_HOPS) + 1
  options["shot_haystack_size"] = task_spec.check_int(
      "shot_haystack_size", options["shot_haystack_size"], minimum=shot_lines)
  for letters, hops, needed in ((_NAME_LETTERS, options["num_hops"], 1),
                                (_SHOT_NAME_LETTERS, shot_lines - 1, options["num_shots"])):
    names = options["num_chains"] * (hops + 1)
    if needed and names > 26**letters // 2:
      raise ValueError(f"num_chains * (num_hops + 1) must be at most {26**letters // 2} "
                       f"({letters}-letter names), got {names}")
  most = (_VALUE_HIGH - _VALUE_LOW) // (1 + options["num_shots"])
  if options["num_chains"] > most:
    raise ValueError(f"num_chains must be at most {most} with num_shots="
                     f"{options['num_shots']} (distinct 5-digit values), got "
                     f"{options['num_chains']}")
  return options


def _names(rng: np.random.Generator, count: int, letters: int) -> List[str]:
  """``count`` distinct random upper-case names of ``letters`` letters."""
  names: List[str] = []
  seen: Set[str] = set()
  while len(names) < count:
    codes = rng.integers(0, 26, size=(count - len(names), letters))
    for row in codes:
      name = "".join(string.ascii_uppercase[c] for c in row)
      if name not in seen:
        seen.add(name)
        names.append(name)
  return names


def _chains(rng: np.random.Generator, *, num_chains: int, num_hops: int, letters: int,
            values: Sequence[int]) -> Tuple[List[List[str]], List[List[str]]]:
  """The variables and the assignment lines of ``num_chains`` chains."""
  names = _names(rng, num_chains * (num_hops + 1), letters)
  variables = [names[c * (num_hops + 1):(c + 1) * (num_hops + 1)] for c in range(num_chains)]
  lines = [[f"VAR {chain[0]} = {value}"]
           + [f"VAR {chain[j + 1]} = VAR {chain[j]}" for j in range(num_hops)]
           for chain, value in zip(variables, values)]
  return variables, lines


def _context(rng: np.random.Generator, num_lines: int, chain_lines: Sequence[Sequence[str]]
             ) -> Tuple[str, List[float]]:
  """Noise lines with each chain's lines inserted in order at random lines, one chain after
  another (RULER's ``sentences.insert(position + j, chain[j])``); the first chain's depths."""
  lines = [haystack_lib.NOISE] * num_lines
  for chain in chain_lines:
    positions = haystack_lib.insertion_positions(rng, num_lines=len(lines),
                                                 num_inserts=len(chain))
    lines = haystack_lib.insert_lines(lines, chain, positions)
  first = set(chain_lines[0])
  depths = [i / len(lines) for i, line in enumerate(lines) if line in first]
  return "\n".join(lines), depths


def _prompt(context: str, value: int, num_vars: int) -> Tuple[str, str]:
  return (_TEMPLATE.format(context=context, query=value),
          _ANSWER_PREFIX.format(num_v=num_vars, query=value))


def make_builder(entropy: Sequence[int], *, length: int, options: Dict[str, Any],
                 model_template: str, count: Callable[[str], int]
                 ) -> Tuple[Callable[[int], task_spec.Draft], int]:
  """Draws a variable-tracking example's chains and shots; returns its prompt builder.

  Args:
    entropy: the example's seed material (:func:`task_spec.rng_for`).
    length: the token budget (unused: the haystack size alone varies).
    options: checked options (:func:`check_options`).
    model_template: the chat template holding ``{task_template}``.
    count: the token counter (unused).

  Returns:
    ``(build, min_units)``: ``build(n)`` is the prompt with ``n`` noise lines, ``min_units``
    the lines of one chain, ``num_hops + 1``.
  """
  del length, count
  rng = task_spec.rng_for(entropy, 0)
  num_chains, num_hops = options["num_chains"], options["num_hops"]
  num_shots = options["num_shots"]
  values = [int(v) + _VALUE_LOW for v in rng.choice(
      _VALUE_HIGH - _VALUE_LOW, size=num_chains * (1 + num_shots), replace=False)]
  variables, chain_lines = _chains(rng, num_chains=num_chains, num_hops=num_hops,
                                   letters=_NAME_LETTERS, values=values[:num_chains])
  shots = []
  shot_hops = min(num_hops, _SHOT_MAX_HOPS)
  for shot in range(1, num_shots + 1):
    shot_values = values[shot * num_chains:(shot + 1) * num_chains]
    shot_vars, shot_lines = _chains(rng, num_chains=num_chains, num_hops=shot_hops,
                                    letters=_SHOT_NAME_LETTERS, values=shot_values)
    context, _ = _context(rng, options["shot_haystack_size"], shot_lines)
    text, prefix = _prompt(context, shot_values[0], shot_hops + 1)
    shots.append(text + prefix + " " + " ".join(shot_vars[0]) + "\n\n")
  answers = tuple(variables[0])
  answer_prefix = _ANSWER_PREFIX.format(num_v=num_hops + 1, query=values[0])

  def build(n: int) -> task_spec.Draft:
    context, depths = _context(task_spec.rng_for(entropy, 1, n), n, chain_lines)
    text, _ = _prompt(context, values[0], num_hops + 1)
    task_text = "".join(shots) + text
    return task_spec.Draft(
        input=task_spec.apply_model_template(model_template, task_text) + answer_prefix,
        answer_prefix=answer_prefix,
        answers=answers,
        metadata={"haystack_size": n, "depths": tuple(depths), "value": values[0],
                  "chains": tuple(tuple(chain) for chain in chain_lines)})

  return build, num_hops + 1

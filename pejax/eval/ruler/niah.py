"""Needle in a haystack (NIAH): single, multi-key, multi-value and multi-query retrieval.

A needle is the line ``"One of the special magic {numbers} for {key} is: {value}."``; the
haystack is RULER's noise line repeated (``haystack="noise"``) or distractor needles with other
keys (``haystack="needle"``, RULER's multikey_2 / multikey_3). ``num_keys`` keys each get
``num_values`` values, one needle per (key, value), inserted in a random order at distinct random
lines; ``num_queries`` of the keys are asked, and the answer is every value of every asked key.
Templates are RULER's ``niah`` template and answer prefix, in the singular when exactly one value
is asked (RULER's ``Some`` -> ``A``, ``are`` -> ``is`` rewrite).

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER, scripts/data/synthetic/niah.py).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

from pejax.eval.ruler import haystack as haystack_lib
from pejax.eval.ruler import needle_values
from pejax.eval.ruler import task_spec

HAYSTACKS = ("noise", "needle")

_NEEDLE = "One of the special magic {kind} for {key} is: {value}."
_TEMPLATE = ("Some special magic {kind} are hidden within the following text. Make sure to "
             "memorize it. I will quiz you about the {kind} afterwards.\n{context}\nWhat are all "
             "the special magic {kind} for {query} mentioned in the provided text?")
_ANSWER_PREFIX = " The special magic {kind} for {query} mentioned in the provided text are"
_TEMPLATE_ONE = ("A special magic {kind} is hidden within the following text. Make sure to "
                 "memorize it. I will quiz you about the {kind} afterwards.\n{context}\nWhat is "
                 "the special magic {kind} for {query} mentioned in the provided text?")
_ANSWER_PREFIX_ONE = " The special magic {kind} for {query} mentioned in the provided text is"


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
  """Validates the NIAH options.

  Args:
    options: ``key_type``, ``value_type`` (``"numbers"``, ``"words"`` or ``"uuids"``),
      ``haystack`` (``"noise"`` or ``"needle"``), ``num_keys``, ``num_values``, ``num_queries``
      (integers >= 1, ``num_queries <= num_keys``).

  Returns:
    The options, integers as ``int``.

  Raises:
    ValueError: naming the bad option and its value.
  """
  options = dict(options)
  options["key_type"] = task_spec.check_choice("key_type", options["key_type"],
                                               needle_values.KINDS)
  options["value_type"] = task_spec.check_choice("value_type", options["value_type"],
                                                 needle_values.KINDS)
  options["haystack"] = task_spec.check_choice("haystack", options["haystack"], HAYSTACKS)
  for name in ("num_keys", "num_values", "num_queries"):
    options[name] = task_spec.check_int(name, options[name], minimum=1)
  if options["num_queries"] > options["num_keys"]:
    raise ValueError(f"num_queries must be at most num_keys ({options['num_keys']}), got "
                     f"{options['num_queries']}")
  return options


def _join_query(keys: Sequence[str]) -> str:
  """RULER's query list: ``"a"``, ``"a, and b"``, ``"a, b, and c"``."""
  if len(keys) == 1:
    return keys[0]
  return ", ".join(keys[:-1]) + ", and " + keys[-1]


def make_builder(entropy: Sequence[int], *, length: int, options: Dict[str, Any],
                 model_template: str, count: Callable[[str], int]
                 ) -> Tuple[Callable[[int], task_spec.Draft], int]:
  """Draws a NIAH example's needles and returns its prompt builder.

  Args:
    entropy: the example's seed material (:func:`task_spec.rng_for`).
    length: the token budget (unused: the haystack size alone varies).
    options: checked options (:func:`check_options`).
    model_template: the chat template holding ``{task_template}``.
    count: the token counter (unused).

  Returns:
    ``(build, min_units)``: ``build(n)`` is the prompt with ``n`` haystack lines (noise lines
    or distractor needles), ``min_units`` the number of needles.
  """
  del length, count
  rng = task_spec.rng_for(entropy, 0)
  num_keys, num_values = options["num_keys"], options["num_values"]
  key_type, value_type = options["key_type"], options["value_type"]
  kind = value_type
  if key_type == value_type:
    drawn = needle_values.draw_values(rng, key_type, num_keys * (1 + num_values))
    keys, flat_values = drawn[:num_keys], drawn[num_keys:]
  else:
    keys = needle_values.draw_values(rng, key_type, num_keys)
    flat_values = needle_values.draw_values(rng, value_type, num_keys * num_values)
  values = [flat_values[i * num_values:(i + 1) * num_values] for i in range(num_keys)]
  needles = [_NEEDLE.format(kind=kind, key=key, value=value)
             for key, key_values in zip(keys, values) for value in key_values]
  needles = [needles[i] for i in rng.permutation(len(needles))]
  asked = [int(i) for i in rng.choice(num_keys, size=options["num_queries"], replace=False)]
  query_keys = [keys[i] for i in asked]
  answers = tuple(value for i in asked for value in values[i])
  query = _join_query(query_keys)
  if len(answers) == 1:
    template, prefix, kind_shown = _TEMPLATE_ONE, _ANSWER_PREFIX_ONE, kind[:-1]
  else:
    template, prefix, kind_shown = _TEMPLATE, _ANSWER_PREFIX, kind
  answer_prefix = prefix.format(kind=kind_shown, query=query)
  real = frozenset(keys) | frozenset(flat_values)

  def build(n: int) -> task_spec.Draft:
    line_rng = task_spec.rng_for(entropy, 1, n)
    if options["haystack"] == "noise":
      lines: List[str] = [haystack_lib.NOISE] * n
    else:
      other_keys = needle_values.draw_values(line_rng, key_type, n, distinct=False, exclude=real)
      other_values = needle_values.draw_values(line_rng, value_type, n, distinct=False,
                                               exclude=real)
      lines = [_NEEDLE.format(kind=kind, key=k, value=v)
               for k, v in zip(other_keys, other_values)]
    positions = haystack_lib.insertion_positions(line_rng, num_lines=n,
                                                 num_inserts=len(needles))
    context = "\n".join(haystack_lib.insert_lines(lines, needles, positions))
    task_text = template.format(kind=kind_shown, context=context, query=query)
    return task_spec.Draft(
        input=task_spec.apply_model_template(model_template, task_text) + answer_prefix,
        answer_prefix=answer_prefix,
        answers=answers,
        metadata={"haystack_size": n,
                  "depths": tuple(float(p) / n for p in positions),
                  "needles": tuple(needles),
                  "query_keys": tuple(query_keys)})

  return build, len(needles)

"""Generating RULER examples fitted to a length in tokens, reproducibly.

An example is determined by (task, seed, index, task options) and, through its haystack size,
by ``length`` and the tokenizer: its content (needle keys and values, chains, common words,
coded vocabulary) is drawn from a generator seeded by ``[seed, index, crc32(task, options)]``
(never Python's salted ``hash``), so the same arguments give the same example on every machine
and examples at different lengths share their content where the task allows (NIAH needles, vt
chains, cwe common words): a length sweep compares lengths, not draws.
"""

from __future__ import annotations

import json
import numbers
from typing import Any, List, Optional, Tuple
import zlib

from pejax.eval.ruler import length_fit
from pejax.eval.ruler import task_spec
from pejax.eval.ruler import tasks as tasks_lib
from pejax.eval.ruler.example import Example


def _check_count(name: str, value: Any, *, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def example_entropy(task: str, options: Any, *, seed: int, index: int) -> Tuple[int, int, int]:
  """The seed material of one example: ``(seed, index, crc32 of the task and its options)``.

  Args:
    task: the task name.
    options: its resolved options (JSON-serializable).
    seed: the seed (>= 0).
    index: the example's index (>= 0).

  Returns:
    Three non-negative integers for ``numpy.random.default_rng``.
  """
  name = json.dumps({"task": task, "options": options}, sort_keys=True)
  return (seed, index, zlib.crc32(name.encode("utf-8")))


def generate(task: str, *, length: int, tokenizer: Any, num_examples: int, seed: int,
             first_index: int = 0, model_template: str = task_spec.TASK_TEMPLATE_FIELD,
             **task_options: Any) -> List[Example]:
  """RULER examples of ``task`` whose prompts fit ``length`` tokens of ``tokenizer``.

  Each prompt is the task's template around the largest haystack that keeps the whole prompt,
  answer prefix included, within ``length`` tokens (RULER sizes ``max_seq_length`` as prompt plus
  ``TASKS[task].tokens_to_generate``: pass ``length = L - tokens_to_generate`` to match a RULER
  length ``L``).

  Args:
    task: a name of :func:`task_names` (``"niah_single_1"``, ``"vt"``, ``"cwe"``, ...).
    length: the largest prompt length, in tokens of ``tokenizer`` (at least the task's
      smallest prompt; 128K and more are fine).
    tokenizer: any object with ``encode(text)`` returning token ids (``ByteTokenizer()``,
      ``pejax.hf.load_tokenizer(...)``, a ``transformers`` tokenizer); special tokens are not
      counted when ``encode`` takes ``add_special_tokens``.
    num_examples: how many examples (>= 1).
    seed: the seed (an integer >= 0).
    first_index: the index of the first example (to generate a large set in shards).
    model_template: a chat template holding ``{task_template}`` once, such as
      ``"[INST] {task_template} [/INST]"`` (RULER's ``meta-chat``); the answer prefix follows it.
      The default is RULER's ``base``: the task's prompt alone.
    **task_options: overrides of ``TASKS[task].options`` (``num_keys=4``, ``num_hops=8``, ...).

  Returns:
    ``num_examples`` :class:`Example` with indices ``first_index, first_index + 1, ...``.

  Raises:
    ValueError: naming the argument and value: an unknown task or option (with the closest
      name), ``length`` below the task's smallest prompt (saying that minimum), a count that is
      not an integer >= 1 (bools refused), a tokenizer without ``encode``, a template without
      ``{task_template}``, or an option out of range.

  References:
    Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
    Models?": https://arxiv.org/abs/2404.06654
  """
  spec = tasks_lib.get_task(task)
  length = _check_count("length", length, minimum=1)
  num_examples = _check_count("num_examples", num_examples, minimum=1)
  seed = _check_count("seed", seed, minimum=0)
  first_index = _check_count("first_index", first_index, minimum=0)
  count = length_fit.token_counter(tokenizer)
  if (not isinstance(model_template, str)
      or model_template.count(task_spec.TASK_TEMPLATE_FIELD) != 1):
    raise ValueError(f"model_template must be a str holding {task_spec.TASK_TEMPLATE_FIELD} "
                     f"once, got {model_template!r}")
  options = spec.resolve_options(task_options)
  examples: List[Example] = []
  size: Optional[int] = None
  for index in range(first_index, first_index + num_examples):
    entropy = example_entropy(task, options, seed=seed, index=index)
    build, min_units = spec.make_builder(entropy, length=length, options=options,
                                         model_template=model_template, count=count)
    try:
      size, draft, tokens = length_fit.fit_to_length(
          build, lambda draft: count(draft.input), length=length, min_units=min_units,
          start=size)
    except length_fit.PromptTooLong as error:
      raise ValueError(f"length must be at least {error.min_tokens} tokens for task {task!r} "
                       f"with this tokenizer and these options (its smallest prompt), got "
                       f"{length}") from None
    examples.append(Example(task=task, input=draft.input, answers=draft.answers,
                            answer_prefix=draft.answer_prefix, length=length,
                            length_tokens=tokens, seed=seed, index=index,
                            metadata=dict(draft.metadata)))
  return examples

"""Synthetic length-generalization tasks by name: batches, reference solvers and an iterator.

Axes: B batch, L sequence length.

Tasks (`TASK_NAMES`) and the meaning of their integer *size*:

  copy      string length n      text `2 n + 2` bytes        options: alphabet
  reverse   string length n      text `2 n + 2` bytes        options: alphabet
  addition  digits per operand n text <= `3 n + 4` bytes     options: reverse_digits
  passkey   total text bytes     text = size bytes           options: depth, num_digits

plus the suites of `pejax.data.ruoss_tasks` (Delétang et al. / Ruoss et al.: reverse_string,
duplicate_string, missing_duplicate, odds_first, binary_addition, bucket_sort, parity,
cycle_navigation, stack_manipulation), `pejax.data.nope_tasks` (Kazemnejad et al.: sort_digits,
sum_digits), `pejax.data.flip_flop` (flip_flop), `pejax.data.associative_recall` (mqar) and
`pejax.data.cope_tasks` (selective_copy, count_symbol, count_increments); their size is the
input length (the number of instructions for flip_flop, of key-value pairs for mqar, of
statements for count_increments), see each module.

A batch draws B sizes uniformly from `[min_size, max_size]` and one example per size, then encodes
them as right-padded rows of length L (`pejax.data.synthetic_example.encode_examples`: the loss
mask covers only the answer bytes). Train with sizes up to `max_size_for(task, train_len)` and
evaluate with larger sizes and a longer L to measure length generalization. For passkey, a `depth`
option fixes the key depth; without it each example draws its depth uniformly from `[0, 1]`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from pejax.data import addition
from pejax.data import associative_recall
from pejax.data import batch_iterator
from pejax.data import cope_tasks
from pejax.data import copy_reverse
from pejax.data import flip_flop
from pejax.data import nope_tasks
from pejax.data import passkey
from pejax.data import ruoss_tasks
from pejax.data import synthetic_example
from pejax.encodings import arg_checks


@dataclasses.dataclass(frozen=True)
class SyntheticTask:
  """How to generate, size and solve one task.

  Attributes:
    name: Registry name.
    generate: `generate(rng, size, **options) -> SyntheticExample`.
    solve: `solve(prompt, **options) -> answer bytes`, the reference solver (prompt alone). For
      a task whose answer interleaves given and scored bytes (an example with `scored`), the
      solver receives the whole text and returns the scored bytes.
    size_range: `size_range(seq_len, **options) -> (min_size, max_size)`: the smallest size and
      the largest one whose text fits a row of length `seq_len`.
    option_names: Keyword options `generate` and `solve` accept.
  """
  name: str
  generate: Callable[..., synthetic_example.SyntheticExample]
  solve: Callable[..., bytes]
  size_range: Callable[..., tuple[int, int]]
  option_names: tuple[str, ...]


def _string_range(seq_len: int, **_) -> tuple[int, int]:
  return 1, (seq_len - 1) // 2  # 2 n + 2 <= seq_len + 1.


def _addition_range(seq_len: int, **_) -> tuple[int, int]:
  return 1, (seq_len - 3) // 3  # 3 n + 4 <= seq_len + 1.


def _passkey_range(seq_len: int, *, num_digits: int = 5, **_) -> tuple[int, int]:
  return passkey.passkey_min_length(num_digits), seq_len + 1


def _generate_passkey(rng: np.random.Generator, size: int, *, depth: float | None = None,
                      num_digits: int = 5) -> synthetic_example.SyntheticExample:
  if depth is None:
    depth = float(rng.uniform(0.0, 1.0))
  return passkey.passkey_example(rng, length=size, depth=depth, num_digits=num_digits)


TASKS: dict[str, SyntheticTask] = {
    "copy": SyntheticTask(
        name="copy",
        generate=lambda rng, size, **o: copy_reverse.copy_example(rng, length=size, **o),
        solve=lambda prompt, **_: copy_reverse.solve_copy(prompt),
        size_range=_string_range, option_names=("alphabet",)),
    "reverse": SyntheticTask(
        name="reverse",
        generate=lambda rng, size, **o: copy_reverse.reverse_example(rng, length=size, **o),
        solve=lambda prompt, **_: copy_reverse.solve_reverse(prompt),
        size_range=_string_range, option_names=("alphabet",)),
    "passkey": SyntheticTask(
        name="passkey", generate=_generate_passkey,
        solve=lambda prompt, **_: passkey.solve_passkey(prompt),
        size_range=_passkey_range, option_names=("depth", "num_digits")),
    "addition": SyntheticTask(
        name="addition",
        generate=lambda rng, size, **o: addition.addition_example(rng, num_digits=size, **o),
        solve=lambda prompt, *, reverse_digits=False, **_: addition.solve_addition(
            prompt, reverse_digits=reverse_digits),
        size_range=_addition_range, option_names=("reverse_digits",)),
}


def _linear_range(smallest: int, a: float, b: int) -> Callable[..., tuple[int, int]]:
  """Size range of a task whose text has at most `a n + b` bytes."""
  return lambda seq_len, **_: (smallest, int((seq_len + 1 - b) // a))


def _register_suite(generators: dict[str, Any], solver: Callable[[str, bytes], bytes]) -> None:
  for name, (generate, smallest, (a, b)) in generators.items():
    TASKS[name] = SyntheticTask(
        name=name, generate=lambda rng, size, g=generate, **o: g(rng, length=size, **o),
        solve=lambda prompt, n=name, **_: solver(n, prompt),
        size_range=_linear_range(smallest, a, b), option_names=())


_register_suite(ruoss_tasks.TASKS, ruoss_tasks.solve)
_register_suite(nope_tasks.TASKS, nope_tasks.solve)
_register_suite(flip_flop.TASKS, lambda _, text: flip_flop.solve(text))
_register_suite(associative_recall.TASKS, lambda _, text: associative_recall.solve(text))
_register_suite(cope_tasks.TASKS, cope_tasks.solve)
TASKS["flip_flop"] = dataclasses.replace(TASKS["flip_flop"], option_names=("ignore_prob",))
TASKS["count_increments"] = dataclasses.replace(TASKS["count_increments"],
                                                option_names=("num_variables", "max_value"))
TASK_NAMES = tuple(TASKS)


def get_task(name: str) -> SyntheticTask:
  """The task registered under `name`; raises `ValueError` listing `TASK_NAMES` otherwise."""
  arg_checks.check_choice("task", name, TASK_NAMES)
  return TASKS[name]


def _check_options(task: SyntheticTask, options: dict[str, Any]) -> None:
  unknown = sorted(set(options) - set(task.option_names))
  if unknown:
    raise ValueError(
        f"task {task.name!r} accepts options {list(task.option_names)}, got unknown {unknown}")


def max_size_for(task: str, seq_len: int, **options: Any) -> int:
  """The largest size of `task` whose examples fit rows of length `seq_len`.

  Args:
    task: A name in `TASK_NAMES`.
    seq_len: Row length L >= 1.
    **options: Task options that change the size range (passkey `num_digits`).

  Returns:
    The largest size (see the module docstring for what a size means per task).

  Raises:
    ValueError: if `task` is unknown or `seq_len` is not a positive int.
  """
  seq_len = arg_checks.check_positive_int("seq_len", seq_len)
  return get_task(task).size_range(seq_len, **options)[1]


def resolve_size_range(task: str, *, seq_len: int, min_size: int | None = None,
                       max_size: int | None = None, **options: Any) -> tuple[int, int]:
  """Fills in default sizes and checks that every size in the range fits `seq_len`.

  Args:
    task: A name in `TASK_NAMES`.
    seq_len: Row length L.
    min_size: Smallest size; None means the task's minimum.
    max_size: Largest size; None means `max_size_for(task, seq_len)`.
    **options: Task options (they can change the minimum, e.g. passkey `num_digits`).

  Returns:
    `(min_size, max_size)`.

  Raises:
    ValueError: if the range is empty, below the task's minimum or does not fit `seq_len`.
  """
  spec = get_task(task)
  _check_options(spec, options)
  seq_len = arg_checks.check_positive_int("seq_len", seq_len)
  lowest, highest = spec.size_range(seq_len, **options)
  if highest < lowest:
    raise ValueError(
        f"seq_len {seq_len} is too short for task {task!r}: its smallest example (size {lowest})"
        " does not fit")
  min_size = lowest if min_size is None else arg_checks.check_positive_int("min_size", min_size)
  max_size = highest if max_size is None else arg_checks.check_positive_int("max_size", max_size)
  if min_size < lowest:
    raise ValueError(f"min_size of task {task!r} must be >= {lowest}, got {min_size}")
  if max_size > highest:
    raise ValueError(
        f"max_size {max_size} of task {task!r} does not fit seq_len {seq_len} (largest fitting"
        f" size is {highest})")
  if min_size > max_size:
    raise ValueError(
        f"min_size must be <= max_size for task {task!r} at seq_len {seq_len}, got min_size"
        f" {min_size} and max_size {max_size}")
  return min_size, max_size


def synthetic_examples(task: str, rng: np.random.Generator | int, *, batch_size: int,
                       seq_len: int, min_size: int | None = None, max_size: int | None = None,
                       **options: Any) -> list[synthetic_example.SyntheticExample]:
  """Draws `batch_size` examples with sizes uniform in `[min_size, max_size]`.

  Args:
    task: A name in `TASK_NAMES`.
    rng: A numpy Generator, or a seed for `np.random.default_rng`.
    batch_size: Examples B >= 1.
    seq_len: Row length L the examples must fit.
    min_size: Smallest size (see the module docstring); None means the task's minimum.
    max_size: Largest size; None means the largest that fits `seq_len`.
    **options: Task options (`alphabet`, `reverse_digits`, `depth`, `num_digits`).

  Returns:
    B examples.
  """
  batch_size = arg_checks.check_positive_int("batch_size", batch_size)
  min_size, max_size = resolve_size_range(
      task, seq_len=seq_len, min_size=min_size, max_size=max_size, **options)
  rng = np.random.default_rng(rng)
  sizes = rng.integers(min_size, max_size + 1, size=batch_size)
  generate = get_task(task).generate
  return [generate(rng, int(size), **options) for size in sizes]


def synthetic_batch(task: str, rng: np.random.Generator | int, *, batch_size: int, seq_len: int,
                    min_size: int | None = None, max_size: int | None = None,
                    **options: Any) -> dict[str, np.ndarray]:
  """`synthetic_examples` encoded as a batch of right-padded rows.

  Args:
    task: A name in `TASK_NAMES`.
    rng: A numpy Generator, or a seed for `np.random.default_rng`.
    batch_size: Examples B >= 1.
    seq_len: Row length L.
    min_size: Smallest size; None means the task's minimum.
    max_size: Largest size; None means the largest that fits `seq_len`.
    **options: Task options (`alphabet`, `reverse_digits`, `depth`, `num_digits`).

  Returns:
    int32 `inputs`, `targets`, `positions` `[B, L]` and float32 `loss_mask` `[B, L]` (1.0 on the
    answer bytes only), as numpy arrays.
  """
  examples = synthetic_examples(task, rng, batch_size=batch_size, seq_len=seq_len,
                                min_size=min_size, max_size=max_size, **options)
  return synthetic_example.encode_examples(examples, seq_len=seq_len)


def solve(task: str, prompt: bytes, **options: Any) -> bytes:
  """The reference answer of `task` for `prompt`, computed from the prompt alone.

  Args:
    task: A name in `TASK_NAMES`.
    prompt: The prompt bytes of an example (everything before the answer).
    **options: Task options the solver needs (addition `reverse_digits`).

  Returns:
    The answer bytes.

  Raises:
    ValueError: if `task` or an option is unknown.
  """
  spec = get_task(task)
  _check_options(spec, options)
  return spec.solve(prompt, **options)


def masked_bytes(row: np.ndarray, mask: np.ndarray) -> bytes:
  """The bytes of one `[L]` row (e.g. `targets[b]`) where `mask[b]` is non-zero, in order.

  Args:
    row: `[L]` integer array of byte ids.
    mask: `[L]` array, e.g. `loss_mask[b]`; non-zero entries select bytes.

  Returns:
    The selected bytes of `row`, in order.
  """
  row = np.asarray(row)
  return row[np.asarray(mask) > 0].astype(np.uint8).tobytes()


def _json_value(value: Any) -> Any:
  return value.decode("latin-1") if isinstance(value, bytes) else value


class SyntheticTaskIterator(batch_iterator.BatchIterator):
  """Batches of one synthetic task; batch `i` is `synthetic_batch(task, default_rng([seed, i]))`."""

  def __init__(self, task: str, *, batch_size: int, seq_len: int, seed: int,
               min_size: int | None = None, max_size: int | None = None, **options: Any):
    """Creates the iterator at step 0.

    Args:
      task: A name in `TASK_NAMES`.
      batch_size: Examples per batch B >= 1.
      seq_len: Row length L.
      seed: Non-negative data seed.
      min_size: Smallest size; None means the task's minimum.
      max_size: Largest size; None means the largest that fits `seq_len`.
      **options: Task options, fixed for every batch.

    Raises:
      ValueError: on an unknown task or option, or a size range that does not fit `seq_len`.
    """
    super().__init__(seed=seed, batch_size=batch_size, seq_len=seq_len)
    self.task = get_task(task).name
    self.min_size, self.max_size = resolve_size_range(
        task, seq_len=self.seq_len, min_size=min_size, max_size=max_size, **options)
    self.options = dict(options)

  def identity(self) -> dict[str, Any]:
    """JSON-serializable fields that a state must match to be restored.

    Returns:
      `{"kind": "synthetic", "task", "seed", "batch_size", "seq_len", "min_size", "max_size",
      "options"}` (bytes options decoded as latin-1).
    """
    return {"kind": "synthetic", "task": self.task, "seed": self.seed,
            "batch_size": self.batch_size, "seq_len": self.seq_len, "min_size": self.min_size,
            "max_size": self.max_size,
            "options": {k: _json_value(v) for k, v in sorted(self.options.items())}}

  def batch_at(self, step: int) -> dict[str, np.ndarray]:
    """Returns batch number `step`, a pure function of `(seed, step)` and the task settings.

    Args:
      step: Non-negative batch index.

    Returns:
      `synthetic_batch(...)` drawn with `self.rng(step)`: int32 `inputs`, `targets`,
      `positions` `[B, L]` and float32 `loss_mask` `[B, L]`.
    """
    return synthetic_batch(self.task, self.rng(step), batch_size=self.batch_size,
                           seq_len=self.seq_len, min_size=self.min_size,
                           max_size=self.max_size, **self.options)


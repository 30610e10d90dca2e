"""Training batch iterators whose position is a step count, so checkpoints resume exactly.

Axes: B batch, L sequence length.

Every iterator yields dicts of numpy arrays

  inputs     int32   [B, L]  token (byte) ids fed to the model
  targets    int32   [B, L]  the next byte of each input position
  positions  int32   [B, L]  explicit positions (0..L-1 per row)
  loss_mask  float32 [B, L]  1.0 where the target is scored, 0.0 elsewhere

and batch number `i` is a pure function of `(seed, i)`: it is drawn from
`np.random.default_rng([seed, i])`. The iterator state is therefore `{"kind", "seed", "step", ...}`
(JSON-serializable); restoring it with `set_state` makes the next batch equal, bit for bit, to the
batch an uninterrupted run would have drawn. `set_state` refuses a state written by an iterator of
another kind or with different data parameters (seed, batch size, length, data size), naming the
field, because resuming onto different data silently breaks the exactness promise.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from pejax.encodings import arg_checks


class BatchIterator(abc.ABC):
  """Base class: iteration and checkpointable state on top of a pure `batch_at(step)`.

  Subclasses implement `batch_at` and `identity`.
  """

  def __init__(self, *, seed: int, batch_size: int, seq_len: int):
    self.seed = arg_checks.check_nonnegative_int("seed", seed)
    self.batch_size = arg_checks.check_positive_int("batch_size", batch_size)
    self.seq_len = arg_checks.check_positive_int("seq_len", seq_len)
    self._step = 0
    self._rows: slice | None = None

  @abc.abstractmethod
  def batch_at(self, step: int) -> dict[str, np.ndarray]:
    """Returns batch number `step` (a pure function of the seed, the step and the data).

    Args:
      step: Non-negative batch index.

    Returns:
      A dict of numpy arrays `[B, L]`: int32 `inputs`, `targets`, `positions` and float32
      `loss_mask` (see the module docstring).
    """

  @abc.abstractmethod
  def identity(self) -> dict[str, Any]:
    """JSON-serializable fields that a state must match to be restored (`kind`, `seed`, ...).

    Returns:
      A dict of the iterator kind and its data parameters (seed, batch size, length, ...).
    """

  def rows_at(self, step: int, rows: slice) -> dict[str, np.ndarray]:
    """Rows `rows` of batch number `step`: `batch_at(step)[k][rows]` for every entry `k`.

    The base class draws the whole batch and slices it; an iterator that can build a few rows
    without the others (a corpus: gather only those windows) overrides this.

    Args:
      step: Non-negative batch index.
      rows: `slice(start, stop)` within `[0, B)`.

    Returns:
      The `batch_at` entries restricted to those rows, `[stop - start, L]` each.
    """
    return {key: value[rows] for key, value in self.batch_at(step).items()}

  def select_rows(self, rows: slice | None) -> None:
    """From now on `next()` yields only rows `rows` of each global batch (`None`: all rows).

    What one process of a multi-process run loads (:class:`pejax.parallel.ShardedBatches` calls
    it with the rows its devices hold). The state (`get_state`) is unchanged: it counts global
    batches, so a checkpoint resumes on any number of processes.

    Args:
      rows: `slice(start, stop)` with `0 <= start < stop <= B`, or `None`.

    Raises:
      ValueError: if `rows` is not such a slice (no step).
    """
    if rows is not None:
      start = 0 if rows.start is None else rows.start
      stop = self.batch_size if rows.stop is None else rows.stop
      if rows.step not in (None, 1) or not 0 <= start < stop <= self.batch_size:
        raise ValueError(
            f"rows must be a slice within [0, batch_size={self.batch_size}) without a step, got "
            f"{rows!r}")
      rows = slice(start, stop)
    self._rows = rows

  @property
  def rows(self) -> slice | None:
    """The rows `next()` yields (`None`: the whole batch); see :meth:`select_rows`."""
    return self._rows

  def rng(self, step: int) -> np.random.Generator:
    """The generator of batch `step`: `np.random.default_rng([seed, step])`.

    Args:
      step: Non-negative batch index.

    Returns:
      A fresh numpy Generator, the same for the same `(seed, step)`.

    Raises:
      ValueError: if `step` is not a non-negative int.
    """
    step = arg_checks.check_nonnegative_int("step", step)
    return np.random.default_rng([self.seed, step])

  @property
  def step(self) -> int:
    """Number of batches drawn so far (the index of the next batch)."""
    return self._step

  def __iter__(self) -> BatchIterator:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._rows is None:
      batch = self.batch_at(self._step)
    else:
      batch = self.rows_at(self._step, self._rows)
    self._step += 1
    return batch

  def get_state(self) -> dict[str, Any]:
    """JSON-serializable position: `identity()` plus `"step"`.

    Returns:
      A dict for `set_state`, e.g. `{"kind": "language_model", "seed": 0, ..., "step": 12}`.
    """
    return {**self.identity(), "step": self._step}

  def set_state(self, state: dict[str, Any]) -> None:
    """Restores a position saved by `get_state`.

    Args:
      state: A dict from `get_state` (possibly through a JSON round trip).

    Raises:
      ValueError: if `state` is not a dict, lacks a field, was written by an iterator of another
        kind or with other data parameters (the message names the field and both values), or has
        a negative / non-integer step.
    """
    if not isinstance(state, dict):
      raise ValueError(f"state must be a dict from get_state(), got {type(state).__name__}")
    expected = self.identity()
    missing = sorted((set(expected) | {"step"}) - set(state))
    if missing:
      raise ValueError(f"state is missing field(s) {missing}; got fields {sorted(state)}")
    for field, value in expected.items():
      if state[field] != value:
        raise ValueError(
            f"cannot restore iterator state: state has {field}={state[field]!r} but this iterator"
            f" has {field}={value!r}")
    self._step = arg_checks.check_nonnegative_int("state['step']", state["step"])

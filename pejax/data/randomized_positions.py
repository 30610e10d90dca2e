"""Randomized positions (Ruoss et al. 2023) for any batch iterator, reproducible on resume.

Ruoss et al., 2023: Randomized Positional Encodings Boost Length Generalization of
Transformers, https://arxiv.org/abs/2305.16843
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import jax
import numpy as np

from pejax.encodings.randomized import randomized_positions


class RandomizedPositions:
  """Wraps a batch iterator, replacing positions by sorted random ones (Ruoss et al. 2023).

  Batch ``i`` uses ``fold_in(PRNGKey(seed), i)`` so resuming reproduces the same positions.
  Positions are drawn for the global batch; a multi-process iterator (``rows`` set by
  :meth:`select_rows`) keeps its own rows of them.

  Args:
    inner: a checkpointable batch iterator (``batch_size``, ``get_state`` / ``set_state``)
      yielding dicts with ``inputs [B, L]``.
    max_position: positions are sampled from ``[0, max_position)``.
    seed: the seed of the position stream.
  """

  def __init__(self, inner: Any, *, max_position: int, seed: int):
    self.inner, self.max_position, self.seed = inner, max_position, seed
    self._step = 0
    self._sample = jax.jit(
        lambda key, b, l: randomized_positions(key, l, max_position=max_position,
                                               batch_shape=(b,)), static_argnums=(1, 2))

  def __iter__(self):
    return self

  @property
  def batch_size(self) -> int:
    """The wrapped iterator's (global) batch size."""
    return self.inner.batch_size

  def select_rows(self, rows: Optional[slice]) -> None:
    """Only ``rows`` of each batch (multi-process); positions are drawn for the global batch.

    Args:
      rows: the rows this process loads (``None``: all).
    """
    self.inner.select_rows(rows)

  def __next__(self) -> Dict[str, np.ndarray]:
    batch = dict(next(self.inner))
    l = batch["inputs"].shape[1]
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self._step)
    rows = getattr(self.inner, "rows", None)
    positions = np.asarray(self._sample(key, int(self.inner.batch_size), l))
    batch["positions"] = positions if rows is None else positions[rows]
    self._step += 1
    return batch

  def get_state(self) -> Dict[str, Any]:
    """The iterator's checkpointable state.

    Returns:
      ``{"inner": the wrapped iterator's state, "randomized_step": batches drawn}``.
    """
    return {"inner": self.inner.get_state(), "randomized_step": self._step}

  def set_state(self, state: Dict[str, Any]) -> None:
    """Resumes where :meth:`get_state` was taken.

    Args:
      state: a :meth:`get_state` result.
    """
    self.inner.set_state(state["inner"])
    self._step = int(state["randomized_step"])

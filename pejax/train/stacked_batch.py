"""N per-model batches as one ``[N, B, L]`` batch: :func:`stack_batches`.

Axes: N models, B batch, L sequence length.

The models of a :class:`pejax.train.ModelStack` each draw their own batches; when their rows
differ in length (one size per batch, Ruoss et al. 2023) they are padded to the longest. The
padding changes no model's loss or gradients: it is appended to each row with ``loss_mask`` 0,
and repeats the row's last position, so a causal decoder's logits at the real tokens do not see
it (and the largest position, which length-dependent RoPE scalings read, is unchanged). Tested
for every registered PE in tests/train/test_many.py.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from pejax.train import train_step as train_step_lib

INT_KEYS = ("inputs", "targets", "positions", "segment_ids")


def stack_batches(batches: Sequence[Optional[Mapping[str, Any]]]) -> dict[str, np.ndarray]:
  """N per-model batches as one ``[N, B, L]`` batch (rows padded to the longest ``L``).

  Padding is appended to each row: token and target id 0, ``loss_mask`` 0, and the row's last
  position (and segment id) repeated. Under causal attention the logits of the real tokens do
  not see it, and the masked mean loss does not count it, so each model's loss and gradients
  are those of its own batch.

  Args:
    batches: one batch per model (keys of :func:`pejax.train.model_inputs`: ``inputs``,
      ``targets``, ``loss_mask`` ``[B, L_i]``, ``positions`` ``[B, L_i]`` or ``[1, L_i]``,
      optionally ``segment_ids``), or ``None`` for a model that does not train this step (it
      gets an all-masked placeholder of the common shape).

  Returns:
    int32 ``inputs``, ``targets`` (and ``segment_ids``) ``[N, B, L]``, float32 ``loss_mask``
    ``[N, B, L]`` and int32 ``positions``: ``[N, 1, L]`` when every batch shares one position
    row, else ``[N, B, L]``.

  Raises:
    ValueError: for no batch at all, a malformed batch (naming its index and key), batches of
      different sizes ``B``, or ``segment_ids`` in some batches but not in others.
  """
  if not batches or all(b is None for b in batches):
    raise ValueError(f"batches must hold at least one batch, got {list(batches)!r}")
  checked = []
  for index, batch in enumerate(batches):
    if batch is None:
      checked.append(None)
      continue
    try:
      checked.append(train_step_lib.model_inputs(batch))
    except ValueError as e:
      raise ValueError(f"batches[{index}]: {e}") from None
  real = [b for b in checked if b is not None]
  sizes = {np.shape(b["inputs"])[0] for b in real}
  if len(sizes) != 1:
    raise ValueError(f"batches must have one batch size B, got sizes "
                     f"{[None if b is None else np.shape(b['inputs'])[0] for b in checked]}")
  keys = {tuple(sorted(b)) for b in real}
  if len(keys) != 1:
    having = [i for i, b in enumerate(checked) if b is not None and "segment_ids" in b]
    lacking = [i for i, b in enumerate(checked) if b is not None and "segment_ids" not in b]
    raise ValueError(f"batches must all have segment_ids or none: segment_ids in some "
                     f"(batches {having}) but not in others (batches {lacking})")
  size = sizes.pop()
  length = max(np.shape(b["inputs"])[1] for b in real)
  shared = all(np.shape(b["positions"])[0] == 1 for b in real)
  rows = 1 if shared else size
  out = {}
  for key in sorted(keys.pop()):
    dtype = np.int32 if key in INT_KEYS else np.float32
    lead = rows if key == "positions" else size
    stacked = np.zeros((len(checked), lead, length), dtype)
    for index, batch in enumerate(checked):
      if batch is None:
        continue
      value = np.asarray(batch[key], dtype)
      value = np.broadcast_to(value, (lead, value.shape[1]))
      width = value.shape[1]
      stacked[index, :, :width] = value
      if key in ("positions", "segment_ids"):
        stacked[index, :, width:] = value[:, -1:]
    out[key] = stacked
  return out

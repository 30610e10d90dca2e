"""One example of a synthetic task, and its encoding as a padded next-byte training row.

Axes: B batch, L sequence length.

An example is the byte string `prompt + answer + suffix` (the suffix is an end marker such as
`b"\\n"`). It is trained like language modelling, `targets` = the text shifted by one byte, but
`loss_mask` is 1.0 only where the target byte belongs to `answer`: the prompt, the end marker and
the padding (byte `PAD_ID` = 0, which never occurs in the text) are not scored. An example of `T`
bytes fills `T - 1` positions of a row, so it fits a row of length L iff `T <= L + 1`.

Because every answer byte is predicted from the correct preceding bytes, "all masked argmax
predictions equal the targets" (teacher-forced exact match) is the same event as "greedy decoding
after the prompt reproduces the answer", so accuracy needs no generation loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from pejax.encodings import arg_checks

PAD_ID = 0  # Padding byte; never part of a task's text.


@dataclasses.dataclass(frozen=True)
class SyntheticExample:
  """A prompt, the answer the model must produce, and an unscored end marker.

  Attributes:
    prompt: Bytes given to the model.
    answer: Bytes the model must predict (the only scored targets).
    suffix: Bytes after the answer (end marker); not scored.
    info: Generator facts for tests and analysis (the operands, the key, its depth, ...).
    scored: Which answer bytes are scored (one bool per answer byte); `None` scores all. Tasks
      whose answer interleaves given bytes with predicted ones (multi-query recall, flip-flop
      reads) feed the whole answer under teacher forcing and score only the predicted bytes.
  """
  prompt: bytes
  answer: bytes
  suffix: bytes = b""
  info: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
  scored: tuple[bool, ...] | None = None

  def __post_init__(self):
    if self.scored is not None and len(self.scored) != len(self.answer):
      raise ValueError(f"scored must have one entry per answer byte ({len(self.answer)}), got "
                       f"{len(self.scored)}")

  @property
  def text(self) -> bytes:
    """The whole example, `prompt + answer + suffix`."""
    return self.prompt + self.answer + self.suffix


def encode_examples(examples: Sequence[SyntheticExample], *, seq_len: int,
                    pad_id: int = PAD_ID) -> dict[str, np.ndarray]:
  """Encodes examples as right-padded next-byte rows with the answer masked in.

  Args:
    examples: B examples, each with `len(text) <= seq_len + 1`.
    seq_len: Row length L >= 1.
    pad_id: Padding byte in `[0, 255]`.

  Returns:
    `{"inputs", "targets", "positions"}` int32 `[B, L]` and `"loss_mask"` float32 `[B, L]`, where
    `inputs[b, j] = text[j]`, `targets[b, j] = text[j + 1]` (pad beyond the text) and
    `loss_mask[b, j] = 1` iff `len(prompt) <= j + 1 < len(prompt) + len(answer)` (and, when
    `scored` is given, that answer byte is scored).

  Raises:
    ValueError: if an example does not fit `seq_len` (naming its index and length) or has an empty
      prompt, `examples` is empty or `pad_id` is not a byte.
  """
  seq_len = arg_checks.check_positive_int("seq_len", seq_len)
  pad_id = arg_checks.check_nonnegative_int("pad_id", pad_id)
  if pad_id > 255:
    raise ValueError(f"pad_id must be a byte in [0, 255], got {pad_id}")
  if not examples:
    raise ValueError("examples must be a non-empty sequence, got 0 examples")
  tokens = np.full((len(examples), seq_len + 1), pad_id, dtype=np.int32)
  loss_mask = np.zeros((len(examples), seq_len), dtype=np.float32)
  for b, example in enumerate(examples):
    text = example.text
    if len(text) > seq_len + 1:
      raise ValueError(
          f"example {b} has {len(text)} bytes, more than seq_len + 1 = {seq_len + 1}; use a"
          " smaller task size or a longer seq_len")
    if not example.prompt:
      raise ValueError(f"example {b} has an empty prompt; the first byte is never a target")
    tokens[b, :len(text)] = np.frombuffer(text, dtype=np.uint8)
    start = len(example.prompt) - 1  # Row index whose target is the first answer byte.
    loss_mask[b, start:start + len(example.answer)] = (
        1.0 if example.scored is None else np.asarray(example.scored, dtype=np.float32))
  positions = np.broadcast_to(np.arange(seq_len, dtype=np.int32)[None, :], loss_mask.shape)
  return {
      "inputs": np.ascontiguousarray(tokens[:, :-1]),
      "targets": np.ascontiguousarray(tokens[:, 1:]),
      "positions": np.array(positions),
      "loss_mask": loss_mask,
  }

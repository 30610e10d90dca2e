"""An evaluation record as JSON: its dataclass fields, with non-finite floats written as None."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict


def json_fields(record: Any) -> Dict[str, object]:
  """The fields of a dataclass record as a JSON-serializable dict.

  JSON has no NaN or infinity: a float field that is not finite (an unevaluated cell, an
  overflowed perplexity) becomes None.

  Args:
    record: a dataclass instance whose fields are JSON values (numbers, strings, ...).

  Returns:
    ``{field name: value}``, non-finite floats replaced by None.
  """
  out = dataclasses.asdict(record)
  for key, value in out.items():
    if isinstance(value, float) and not math.isfinite(value):
      out[key] = None
  return out

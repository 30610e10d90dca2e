"""JSON records written atomically: a reader (or a run killed mid-write) never sees half a file."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any


def write_json_atomic(path: pathlib.Path, payload: Any) -> None:
  """Writes ``payload`` as indented JSON to ``path`` through a temporary file (never half-written).

  Args:
    path: the file to write.
    payload: a JSON-serializable value (others are written as ``str``).
  """
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
  os.replace(tmp, path)

"""Files written atomically: a reader (or a run killed mid-write) never sees half a file, and a
failed write leaves the previous file as it was.

Each write goes to a temporary name in the same folder (``<name>.tmp-<pid>``, so two processes
never share one) and is renamed over the target only once complete; a failure removes the
temporary file.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any


def write_text_atomic(path: os.PathLike | str, text: str) -> None:
  """Writes ``text`` (UTF-8) to ``path`` through a temporary file and a rename.

  Args:
    path: the file to write.
    text: its whole content.
  """
  path = pathlib.Path(path)
  tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
  try:
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
  finally:
    if tmp.exists():
      tmp.unlink()


def write_json_atomic(path: os.PathLike | str, payload: Any) -> None:
  """Writes ``payload`` as indented JSON to ``path`` through a temporary file (never half-written).

  Args:
    path: the file to write.
    payload: a JSON-serializable value (others are written as ``str``).
  """
  write_text_atomic(path, json.dumps(payload, indent=1, default=str) + "\n")

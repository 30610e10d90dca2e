"""Where a benchmark leaves its result: ``<out>/<name>.md`` (the table people read) and
``<out>/<name>.json`` (the numbers, setup and provenance), both written atomically, so an
interrupted run never leaves half a committed result (``pejax.json_file``)."""

from __future__ import annotations

import pathlib
from typing import Any

from pejax import json_file


def write(out: pathlib.Path | str, name: str, markdown: str, record: Any) -> pathlib.Path:
  """Writes ``<out>/<name>.md`` and ``<out>/<name>.json`` (folder made if needed).

  Args:
    out: the results folder (``benchmarks/results`` by default in every benchmark).
    name: the file stem.
    markdown: the report's text.
    record: the JSON-serializable result (values that are not are written as ``str``).

  Returns:
    The path of the markdown file.
  """
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  json_file.write_text_atomic(out / f"{name}.md", markdown)
  json_file.write_json_atomic(out / f"{name}.json", record)
  return out / f"{name}.md"

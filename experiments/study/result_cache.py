"""A JSON file cache keyed by what a value depends on: a re-run study skips finished work."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from typing import Any, Callable, Mapping

from pejax import json_file


_MISSING = object()  # (A stored value may be None.)


def _cache_digest(key: Mapping[str, Any]) -> str:
  return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def cached_value(path: os.PathLike | str, key: Mapping[str, Any], default: Any = None) -> Any:
  """What :func:`cached` stored at ``path`` for this very ``key``, or ``default`` (no file,
  another key, an unreadable file); computes nothing."""
  path = pathlib.Path(path)
  if not path.exists():
    return default
  try:
    stored = json.loads(path.read_text())
    if stored.get("key_digest") == _cache_digest(key):
      return stored["value"]
  except (OSError, json.JSONDecodeError, KeyError, AttributeError):
    pass
  return default


def cached(path: os.PathLike | str, key: Mapping[str, Any],
           compute: Callable[[], Any]) -> Any:
  """JSON cache: returns the stored value when ``path`` holds the same ``key``, else computes.

  Lets a re-run study skip evaluations it already did (e.g. after a crash or a report tweak).
  """
  path = pathlib.Path(path)
  digest = _cache_digest(key)
  stored = cached_value(path, key, default=_MISSING)
  if stored is not _MISSING:
    return stored
  value = compute()
  path.parent.mkdir(parents=True, exist_ok=True)
  json_file.write_text_atomic(path, json.dumps(
      {"key": key, "key_digest": digest, "value": value}, default=str, allow_nan=True))
  return value

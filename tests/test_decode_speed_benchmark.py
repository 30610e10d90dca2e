"""``benchmarks/decode_speed.py`` at a tiny size: every cache kind decodes, and the cache bytes
follow from the kind (quantized caches are smaller, ring buffers do not grow with the context).

The benchmark runs in its own process, as ``benchmarks/run_all.py`` runs it: in a long-lived
xdist worker, late in the full suite, this test's process died of a segmentation fault about once
in four full runs (CI 2026-12-01 and here; never in 5 runs alone nor in 70 back-to-back runs in one
process, optimized or not). A fresh process is the path users run, and a crash there is one
failed test with its stderr, not a lost worker.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import decode_speed

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_run_measures_every_kind_and_its_bytes(tmp_path):
  args = ["--layers", "1", "--d_model", "32", "--heads", "2", "--contexts", "24,48", "--new",
          "3", "--ring", "16", "--sinks", "2", "--repeats", "1", "--generate_max_context", "24",
          "--out", str(tmp_path)]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  proc = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "benchmarks.decode_speed",
                         *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                        check=False)
  assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
  record = json.loads((tmp_path / "decode_speed.json").read_text())
  rows = {(r["context"], r["kind"]): r for r in record["rows"]}
  kinds = list(decode_speed.cache_kinds(16, 2))
  assert set(rows) == {(c, k) for c in (24, 48) for k in kinds}
  for (context, _), row in rows.items():
    assert row["loop_tokens_per_s"] is None or row["loop_tokens_per_s"] > 0
    # generate is timed up to --generate_max_context only.
    assert ("generate_s" in row) == (context <= 24)
  for context in (24, 48):
    full = rows[(context, "float32 full")]["cache_bytes"]
    assert rows[(context, "int8 full")]["cache_bytes"] < 0.5 * full
    assert rows[(context, "fp8 full")]["cache_bytes"] < 0.5 * full
  for kind in ("window 16", "sinks 2+14"):  # A ring's size does not depend on the context.
    assert rows[(24, kind)]["cache_bytes"] == rows[(48, kind)]["cache_bytes"]
  assert rows[(48, "float32 full")]["cache_bytes"] > rows[(24, "float32 full")]["cache_bytes"]
  assert len(record["rows"]) == len(rows)  # No (context, kind) row twice.
  assert "| 48 | int8 full |" in (tmp_path / "decode_speed.md").read_text()

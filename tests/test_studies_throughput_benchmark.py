"""``benchmarks/studies_throughput.py`` at a tiny size, in its own process as users run it: both
configurations are timed, and the columns that explain the ratio are consistent (one model alone
computes exactly the tokens it drew; a program of N models pads every batch to the longest of
the N, so it computes at least as many; the arithmetic rate is the 6 x parameters x tokens
estimate over the timed seconds)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_run_reports_padding_and_arithmetic_rate(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  proc = subprocess.run(
      [sys.executable, "-X", "faulthandler", "-m", "benchmarks.studies_throughput", "--quick",
       "--tasks=ruoss", "--sizes=1,3", "--steps=3", "--rounds=1", "--warmup=2",
       f"--out={tmp_path}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=500,
      check=False)
  assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
  record = json.loads((tmp_path / "studies_throughput.json").read_text())
  rows = {r["models"]: r for r in record["rows"]}
  assert set(rows) == {1, 3}
  assert rows[1]["padding"] == 1.0
  assert rows[3]["padding"] >= 1.0
  assert rows[1]["params"] == rows[3]["params"] > 0  # Parameters of one model.
  for row in rows.values():
    assert row["gflops"] > 0 and row["matmul_gflops"] > 0
    # One round: the rate is 6 P x tokens a step over the step's time.
    assert row["gflops"] == pytest.approx(
        6 * row["params"] * row["tokens_per_step"] / (row["step_ms"] * 1e-3) / 1e9, rel=1e-6)
  share = record["setup"]["fixed_cost_share"]["ruoss"]
  assert 0 < share < 5  # 1 row against 4 (--quick): timing noise allowed, not a count.
  text = (tmp_path / "studies_throughput.md").read_text()
  assert "Fixed cost per step" in text
  assert "tokens computed / drawn" in text and "matmul GFLOP/s" in text

"""``benchmarks/accelerator.py --smoke`` runs on this CPU and records what it could not measure.

Claims: the script runs end to end in smoke mode on a CPU (the Pallas kernel interpreted), writes
its JSON and markdown, measures every implementation that exists here, and records the cuDNN
cases as skipped with the reason instead of a number; its record says it was not measured on an
accelerator.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import accelerator


@pytest.mark.slow
def test_smoke_run_on_cpu(tmp_path):
  record = accelerator.main(["--smoke", "--pes", "alibi", "--implementations",
                             "pejax-blockwise,pallas,xla,cudnn", "--out", str(tmp_path)])
  assert json.loads((tmp_path / "accelerator_smoke.json").read_text())["setup"]["smoke"]
  assert "| pallas | alibi |" in (tmp_path / "accelerator_smoke.md").read_text()
  assert record["setup"]["measured_on_accelerator"] is False
  for part in ("attention", "training"):
    rows = {row["impl"]: row for row in record[part]}
    assert set(rows) == {"pejax-blockwise", "pallas", "xla", "cudnn"}
    assert rows["cudnn"]["skipped"] == "cuDNN flash attention needs a CUDA GPU"
    for impl in ("pejax-blockwise", "pallas", "xla"):
      assert "skipped" not in rows[impl], rows[impl]
  for row in record["attention"]:
    if "skipped" not in row:
      assert row["forward_ms"] > 0 and row["backward_ms"] > 0
  for row in record["training"]:
    if "skipped" not in row:
      assert row["tokens_per_s"] > 0 and row["mfu"] is None  # No known peak for a CPU.


def test_unknown_implementation_is_a_usage_error():
  with pytest.raises(SystemExit):
    accelerator.main(["--smoke", "--implementations", "flash"])


def test_time_budget_skips_cases_and_still_writes_the_tables(tmp_path):
  record = accelerator.main(["--smoke", "--pes", "alibi", "--implementations", "pallas",
                             "--budget_s", "1e-9", "--out", str(tmp_path)])
  rows = record["attention"] + record["training"]
  assert len(rows) == 2
  assert all(row["skipped"].startswith("time budget of") for row in rows)
  written = json.loads((tmp_path / "accelerator_smoke.json").read_text())
  assert written["attention"] == json.loads(json.dumps(record["attention"], default=str))

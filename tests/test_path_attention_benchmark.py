"""``benchmarks/path_attention.py`` at a tiny size: both schedules' step times and the memory
probes are measured and written, with provenance; bad arguments are usage errors."""

from __future__ import annotations

import json

import pytest

from benchmarks import path_attention


@pytest.mark.slow
def test_tiny_run_writes_step_times_and_memory(tmp_path):
  result = path_attention.main(["--layers", "1", "--d_model", "32", "--heads", "2",
                                "--block_size", "16", "--time_length", "48", "--rounds", "1",
                                "--memory_lengths", "64,96", "--dense_max", "64",
                                "--out", str(tmp_path)])
  timing = result["timing"]
  # The two schedules compute the same model: the same loss.
  assert timing["dense"]["loss"] == pytest.approx(timing["blockwise"]["loss"], rel=1e-5)
  assert result["blockwise_over_dense"] == pytest.approx(
      timing["blockwise"]["median_s"] / timing["dense"]["median_s"])
  cases = [(c["implementation"], c["length"]) for c in result["memory"]]
  assert cases == [("dense", 64), ("blockwise", 64), ("blockwise", 96)]
  assert all(c["peak_rss_mib"] > 0 for c in result["memory"])
  record = json.loads((tmp_path / "path_attention.json").read_text())
  assert record["provenance"]["command"].startswith("python -m benchmarks.path_attention")
  text = (tmp_path / "path_attention.md").read_text()
  assert "| 96 | blockwise |" in text and "Blockwise / dense step time" in text


@pytest.mark.parametrize("flag, value", [("--rounds", "0"), ("--block_size", "-1"),
                                         ("--child_impl", "sparse")])
def test_bad_arguments_are_usage_errors(flag, value, capsys):
  with pytest.raises(SystemExit) as exit_info:
    path_attention.parse_args([flag, value])
  assert exit_info.value.code == 2
  assert flag in capsys.readouterr().err

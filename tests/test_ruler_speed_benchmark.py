"""``benchmarks/ruler_speed.py`` at a tiny size: the cell speed, the prefill share and the
long-example probe are measured and written, with provenance; bad arguments are usage errors."""

from __future__ import annotations

import json

import pytest

from benchmarks import ruler_speed


@pytest.mark.slow
def test_tiny_run_writes_speed_prefill_share_and_the_long_example(tmp_path):
  result = ruler_speed.main(["--lengths", "512", "--examples", "2", "--batch", "2",
                             "--repeats", "1", "--long", "600", "--out", str(tmp_path)])
  (row,) = result["rows"]
  assert row["length"] == 512 and row["examples"] == 2 and row["batch"] == 2
  assert row["examples_per_s"] == pytest.approx(2 / row["cell_s"])
  assert 0 < row["prefill_share"] <= 1.5  # Timing noise may push a tiny prefill past 1.
  long = result["long"]
  assert long["length"] == 600 and long["status"] == "ok"
  assert long["peak_rss_mib"] >= long["rss_before_mib"] > 0
  record = json.loads((tmp_path / "ruler_speed.json").read_text())
  assert record["provenance"]["command"].startswith("python -m benchmarks.ruler_speed")
  text = (tmp_path / "ruler_speed.md").read_text()
  assert "| 512 |" in text and "One 600-token example" in text


@pytest.mark.parametrize("flag, value", [("--examples", "0"), ("--batch", "-1"),
                                         ("--long", "-5")])
def test_bad_arguments_are_usage_errors(flag, value, capsys):
  with pytest.raises(SystemExit) as exit_info:
    ruler_speed.parse_args([flag, value])
  assert exit_info.value.code == 2
  assert f"{flag} must be" in capsys.readouterr().err

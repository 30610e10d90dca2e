"""The leaderboard of experiments/results/README.md: built from results.json, between markers."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest

from experiments.algorithmic import leaderboard
from experiments.study import seed_statistics


def _payload(study, family, board, mode="quick", seeds=(0,)):
  return {"study": study, "mode": mode, "date": "2026-12-01 02:00 UTC",
          "results": {"settings": {"seeds": list(seeds),
                                   "recipe": {"fit_threshold": 0.99, "max_steps": 800}},
                      "leaderboard": {family: board}}}


class LeaderboardTest(absltest.TestCase):

  def test_table_has_a_row_per_pe_and_labels_each_column(self):
    a = _payload("length_generalization", "copy / reverse",
                 {"rope": seed_statistics.spread([0.1, 0.2, 0.3]),
                  "none": seed_statistics.spread([0.5])},
                 mode="full", seeds=(0, 1, 2))
    b = _payload("ruoss_suite", "Ruoss tasks", {"rope": seed_statistics.spread([0.4])},
                 mode="full")
    b["results"]["leaderboard_trainability"] = {}  # A record with the raw view.
    b["provenance"] = {"commit": "0123456789abcdef0123"}
    text = leaderboard.table([a, b])
    self.assertIn("| PE | copy / reverse | Ruoss tasks |", text)
    self.assertIn("| rope | 0.20 [0.10-0.30] | 0.40 |", text)
    self.assertIn("| none | 0.50 |  |", text)
    self.assertIn("`ruoss_suite` full run, 1 seed(s)", text)
    self.assertIn("`length_generalization` full run, 3 seed(s)", text)
    self.assertIn("commit not recorded (stale); view trainability", text)  # An old record.
    self.assertIn("commit 0123456789ab; view raw: every seed as measured", text)

  def test_only_full_runs_give_cells(self):
    a = _payload("length_generalization", "copy / reverse",
                 {"rope": seed_statistics.spread([0.1, 0.2, 0.3])}, mode="full", seeds=(0, 1, 2))
    quick = _payload("ruoss_suite", "Ruoss tasks", {"rope+randomized": seed_statistics.spread(
        [0.0])})
    text = leaderboard.table([a, quick])
    self.assertNotIn("Ruoss tasks |", text)
    self.assertNotIn("rope+randomized", text)
    self.assertIn("not shown: `ruoss_suite` (quick run, 2026-12-01 02:00 UTC: indicative", text)

  def test_a_column_scored_per_token_says_so(self):
    b = _payload("ruoss_suite", "Ruoss tasks", {"rope": seed_statistics.spread([0.4])},
                 mode="full")
    b["results"]["settings"]["metric"] = "token_accuracy"
    text = leaderboard.table([b])
    self.assertIn("| PE | Ruoss tasks (per-token accuracy) |", text)
    self.assertIn("- Ruoss tasks (per-token accuracy): `ruoss_suite` full run", text)

  def test_readme_section_is_replaced_between_markers(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    readme = tmp / "README.md"
    readme.write_text(f"# x\n{leaderboard.START}\nold\n{leaderboard.END}\ntail\n")
    self.assertTrue(leaderboard.update_readme(readme, "new\n"))
    self.assertEqual(readme.read_text(),
                     f"# x\n{leaderboard.START}\nnew\n{leaderboard.END}\ntail\n")
    plain = tmp / "plain.md"
    plain.write_text("no markers")
    self.assertFalse(leaderboard.update_readme(plain, "new\n"))

  def test_load_reads_only_studies_with_a_leaderboard(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    (tmp / "ruoss_suite").mkdir()
    (tmp / "ruoss_suite" / "results.json").write_text(json.dumps(
        _payload("ruoss_suite", "Ruoss tasks", {})))
    (tmp / "content_tasks").mkdir()
    (tmp / "content_tasks" / "results.json").write_text(json.dumps({"results": {}}))
    self.assertEqual([p["study"] for p in leaderboard.load(tmp)], ["ruoss_suite"])


if __name__ == "__main__":
  absltest.main()

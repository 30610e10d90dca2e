"""Every number the README prints comes from the code or a committed record.

* The quickstart sentence (parameters, window, steps, the lengths) is the default config's.
* The extrapolation table is ``experiments/results/extrapolation/results.json``'s summary, cell
  by cell, and the degradation ratios quoted beside it are computed from the same means.
* Each "N of M" of the other studies is the count of held verdicts in that study's results.json.
* A cited report whose results.json records no provenance (commit, versions) is called stale.

A study re-run that changes a number makes this test fail until the README says the new one.
"""

from __future__ import annotations

import json
import pathlib
import re

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = ROOT / "experiments" / "results"


def _section(title: str) -> str:
  match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
  assert match, f"README has no section {title!r}"
  return match.group(1)


def _summary() -> dict:
  record = json.loads((RESULTS / "extrapolation" / "results.json").read_text())
  return record["results"]


class QuickstartTest(absltest.TestCase):

  def test_model_size_window_steps_and_lengths_are_the_default_configs(self):
    import jax  # pylint: disable=g-import-not-at-top
    from flax import nnx  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
    from pejax import experiment_config  # pylint: disable=g-import-not-at-top
    from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
    config = experiment_config.get_default_config()
    model = nnx.eval_shape(lambda: Decoder(decoder_from_config.decoder_config_from(config),
                                           rngs=nnx.Rngs(0)))
    params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    text = _section("Quickstart")
    self.assertIn(f"{params / 1e6:.2f}M-parameter {config.pe.name.replace('rope', 'RoPE')}",
                  text)
    self.assertIn(f"on {config.data.train_len}-byte windows for {config.train.steps} steps", text)
    from pejax.eval import run_evaluation  # pylint: disable=g-import-not-at-top
    multipliers = [n // int(config.data.train_len) for n in run_evaluation.eval_lengths(config)]
    self.assertIn(f"{multipliers[0]}x-{multipliers[-1]}x the training length", text)


class ExtrapolationTableTest(absltest.TestCase):

  def test_every_cell_is_the_committed_mean_min_and_max(self):
    results = _summary()
    lengths = [str(n) for n in results["lengths"]]
    rows = {}
    for line in _section("Results").splitlines():
      cells = [c.strip() for c in line.strip().strip("|").split("|")]
      if len(cells) == len(lengths) + 1 and cells[0] in results["summary"]:
        rows[cells[0]] = cells[1:]
    self.assertEqual(sorted(rows), sorted(results["settings"]["pes"]))
    for pe, cells in rows.items():
      for length, cell in zip(lengths, cells):
        stats = results["summary"][pe]["nonoverlap"][length]
        expected = ("n/a" if stats.get("status") != "ok" else
                    f"{stats['mean']:.2f} [{stats['min']:.2f}-{stats['max']:.2f}]")
        self.assertEqual(cell, expected, f"README cell {pe} at {length}")

  def test_the_quoted_degradation_ratios_are_the_means_at_16x_over_1x(self):
    results = _summary()
    first, last = str(results["lengths"][0]), str(results["lengths"][-1])
    text = _section("Results")

    def ratio(pe: str) -> str:
      stats = results["summary"][pe]["nonoverlap"]
      return f"x{stats[last]['mean'] / stats[first]['mean']:.2f}"

    self.assertIn(f"out to 16x ({ratio('alibi')})", text)
    self.assertIn(f"sinusoidal and RoPE degrade ({ratio('sinusoidal')} and {ratio('rope')} at "
                  "16x)", text)
    self.assertIn(f"T5's bias degrades less than RoPE ({ratio('t5')})", text)

  def test_the_header_counts_models_seeds_and_tokens(self):
    settings = _summary()["settings"]
    text = _section("Results")
    self.assertIn(f"{len(settings['pes']) * len(settings['seeds'])} models", text)
    self.assertIn(f"{settings['steps']} steps, {len(settings['seeds'])} seeds", text)
    self.assertIn(f"{settings['eval_tokens']} validation tokens", text)


class StudyCountsTest(absltest.TestCase):

  def test_each_held_count_is_the_studys_record(self):
    counts = re.findall(r"(\d+) of (\d+)[^\[]*?\[report\]\(experiments/results/(\w+)/"
                        r"report\.md", _section("Other studies"))
    self.assertGreaterEqual(len(counts), 8)
    for held, total, study in counts:
      verdicts = json.loads((RESULTS / study / "results.json").read_text())["verdicts"]
      self.assertEqual((int(held), int(total)),
                       (sum(v.get("held") is True for v in verdicts), len(verdicts)), study)


class StalenessTest(absltest.TestCase):

  def test_a_report_without_provenance_is_called_stale_where_the_readme_cites_it(self):
    # Issue 45: a committed record that does not say which commit produced it is "stale" in
    # every README paragraph or list item that cites it, until a re-run replaces it.
    text = _section("Results") + _section("Other studies")
    items = re.split(r"\n(?=- )|\n\n", text)
    cited = 0
    for item in items:
      for study in re.findall(r"experiments/results/(\w+)/report\.md", item):
        cited += 1
        record = json.loads((RESULTS / study / "results.json").read_text())
        has_provenance = bool(record.get("provenance") or record.get("meta", {}).get(
            "provenance"))
        if not has_provenance:
          self.assertIn("stale", item, f"{study} has no provenance: {item!r}")
        else:  # A commit the README names is the record's.
          commit = (record.get("provenance") or record["meta"]["provenance"])["commit"] or ""
          for named in re.findall(r"re-scored at (?:commit )?([0-9a-f]{7,})", item):
            self.assertTrue(commit.startswith(named), f"{study}: {named} vs {commit}")
    self.assertGreaterEqual(cited, 10)


if __name__ == "__main__":
  absltest.main()

"""Tests of experiments/study/: overrides, spreads, verdicts, report, plots, cache."""

from __future__ import annotations

import json
import os
import pathlib
from unittest import mock

from absl.testing import absltest

from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax import experiment_config
from pejax.eval import report as eval_report


class OverridesTest(absltest.TestCase):

  def test_apply_casts_strings_to_the_field_type(self):
    config = experiment_config.get_default_config()
    overrides = {"model.d_model": "64", "optim.learning_rate": "0.01",
                 "model.tie_embeddings": "false", "data.name": "passkey"}
    study_options.apply_overrides(config, overrides)
    self.assertEqual(config.model.d_model, 64)
    self.assertIsInstance(config.model.d_model, int)
    self.assertAlmostEqual(config.optim.learning_rate, 0.01)
    self.assertFalse(config.model.tie_embeddings)
    self.assertEqual(config.data.name, "passkey")

  def test_bad_override_names_the_path(self):
    config = experiment_config.get_default_config()
    with self.assertRaisesRegex(ValueError, "model.nope"):
      study_options.apply_overrides(config, {"model.nope": 1})

  def test_run_dir_depends_on_model_settings_only(self):
    a = experiment_config.get_default_config()
    b = experiment_config.get_default_config()
    b.eval.num_tokens = 7  # Evaluation settings do not change the model.
    self.assertEqual(trained_runs.run_dir_for(a, "r"), trained_runs.run_dir_for(b, "r"))
    b.seed = 1
    self.assertNotEqual(trained_runs.run_dir_for(a, "r"), trained_runs.run_dir_for(b, "r"))


class NumbersTest(absltest.TestCase):

  def test_spread_ignores_missing_values(self):
    stats = seed_statistics.spread([1.0, None, 3.0, float("nan")])
    self.assertEqual(stats["n"], 2)
    self.assertAlmostEqual(stats["mean"], 2.0)
    self.assertAlmostEqual(stats["min"], 1.0)
    self.assertAlmostEqual(stats["max"], 3.0)
    self.assertIsNone(seed_statistics.spread([None])["mean"])

  def test_formatting(self):
    self.assertEqual(table_cells.fmt(None), "n/a")
    self.assertEqual(table_cells.fmt(float("inf")), "n/a")
    self.assertEqual(table_cells.fmt(1.234), "1.23")
    self.assertEqual(table_cells.fmt_spread(seed_statistics.spread([1.0, 3.0])), "2.00 [1.00-3.00]")
    self.assertEqual(table_cells.fmt_spread(seed_statistics.spread([1.0])), "1.00")


class VerdictTest(absltest.TestCase):

  def test_status_follows_the_check(self):
    held = expectations.verdict("e", "c", "m", lambda: 1 < 2)
    failed = expectations.verdict("e", "c", "m", lambda: 2 < 1)
    missing = expectations.verdict("e", "c", "m", lambda: None < 1)  # TypeError: not measured.
    self.assertEqual(held.status, expectations.HELD)
    self.assertEqual(failed.status, expectations.NOT_HELD)
    self.assertEqual(missing.status, expectations.NOT_MEASURED)


class ReportTest(absltest.TestCase):

  def test_full_mode_prints_bold_verdicts_and_one_seed_is_indicative(self):
    report = markdown_report.Report("A study", study="x", options=study_options.StudyOptions())
    report.add_verdict(expectations.verdict("e", "c", "m", lambda: True))
    self.assertIn("**held**", report.verdict_section())
    self.assertIn("1 of 1 expectations held", report.verdict_section())
    report.indicative = "1 seed, at most 800 steps"
    self.assertIn("indicative (1 seed, at most 800 steps): held", report.verdict_section())
    self.assertNotIn("**held**", report.verdict_section())

  def test_report_writes_markdown_json_and_png(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(quick=True, command="python -m experiments.x --quick")
    report = markdown_report.Report("A study", study="x", options=options)
    report.add_verdict(expectations.verdict("claim A", "a < b", "1 < 2", lambda: True))
    report.add_verdict(expectations.verdict("claim B", "a > b", "1 > 2", lambda: False))
    report.table(["pe", "ppl"], [["rope", "1.00"]], caption="**table**")
    png = eval_report.plot_curves(
        workdir / "curve.png", {"a": [(1, 2.0, 1.5, 2.5), (2, 3.0, 2.0, 4.0)], "b": [(1, None)]},
        xlabel="x", ylabel="y", logx=True, vline=1, hline=2.5)
    report.image(png, "a curve")
    path = report.write(workdir, {"numbers": [1.0, float("nan")]})
    text = path.read_text()
    self.assertIn("# A study", text)
    self.assertIn("`python -m experiments.x --quick`", text)
    self.assertIn("## Expectation vs measured", text)
    # Quick mode never prints a bold verdict: it is labelled indicative.
    self.assertNotIn("**held**", text)
    self.assertIn("indicative (quick mode): held", text)
    self.assertIn("indicative (quick mode): did not hold", text)
    self.assertIn("Indicative only (quick mode): 1 of 2 expectations pointed", text)
    self.assertIn("![a curve](curve.png)", text)
    self.assertEqual((workdir / "curve.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((workdir / "results.json").read_text())
    self.assertEqual([v["status"] for v in payload["verdicts"]], ["held", "did not hold"])
    self.assertIsNone(payload["results"]["numbers"][1])  # NaN -> null: strict JSON.

  def test_markdown_table(self):
    table = table_cells.markdown_table(["a", "b"], [[1, 2]])
    self.assertEqual(table.splitlines(), ["| a | b |", "|:---|---:|", "| 1 | 2 |"])


class CacheTest(absltest.TestCase):

  def test_cached_recomputes_only_when_the_key_changes(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "c.json"
    calls = []
    compute = lambda: calls.append(1) or {"x": len(calls)}
    self.assertEqual(result_cache.cached(path, {"k": 1}, compute), {"x": 1})
    self.assertEqual(result_cache.cached(path, {"k": 1}, compute), {"x": 1})
    self.assertEqual(result_cache.cached(path, {"k": 2}, compute), {"x": 2})
    self.assertLen(calls, 2)

  def test_cached_value_reads_this_key_only_and_computes_nothing(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "c.json"
    self.assertIsNone(result_cache.cached_value(path, {"k": 1}))  # No file.
    result_cache.cached(path, {"k": 1}, lambda: {"x": 1})
    self.assertEqual(result_cache.cached_value(path, {"k": 1}), {"x": 1})
    self.assertEqual(result_cache.cached_value(path, {"k": 2}, default="none"), "none")
    path.write_text("not json")
    self.assertIsNone(result_cache.cached_value(path, {"k": 1}))
    path.write_text("[1]")  # JSON, not a record.
    self.assertIsNone(result_cache.cached_value(path, {"k": 1}))

  def test_a_stored_none_is_a_value_not_a_miss(self):
    path = pathlib.Path(self.create_tempdir().full_path) / "c.json"
    calls = []
    compute = lambda: calls.append(1)  # Returns None.
    self.assertIsNone(result_cache.cached(path, {"k": 1}, compute))
    self.assertIsNone(result_cache.cached(path, {"k": 1}, compute))
    self.assertLen(calls, 1)


class LaunchStudyFlagTest(absltest.TestCase):
  """``launch.py --study=<name>``: bad combinations are usage errors (in-process)."""

  def test_usage_errors(self):
    import launch  # pylint: disable=g-import-not-at-top
    from absl import app  # pylint: disable=g-import-not-at-top
    from absl import flags  # pylint: disable=g-import-not-at-top
    for args, message in (
        (["--study=nope"], "extrapolation"),
        (["--study=extrapolation", "--pe=rope"], "does not take --pe"),
        (["--study=extrapolation", "--config.model.nope=1"], "model.nope"),
        (["--quick"], "--quick only takes effect with --study"),
    ):
      with self.assertRaisesRegex((app.UsageError, flags.Error), message):
        launch.run(["launch.py", *args])

  def test_study_config_files_and_overrides_reach_the_study(self):
    import launch  # pylint: disable=g-import-not-at-top
    from experiments import extrapolation  # pylint: disable=g-import-not-at-top
    seen = []
    with mock.patch.object(extrapolation, "run", seen.append):
      launch.run(["launch.py", "--study=extrapolation", "--quick", "--seeds=0,1", "--steps=7",
                  "--config.model.d_model=48", "--workdir=/tmp/report"])
      root = pathlib.Path(__file__).resolve().parents[2]
      launch.run(["launch.py", f"--config={root}/experiments/configs/extrapolation.py",
                  "--config.study.runs_dir=/tmp/models"])
    quick, full = seen
    self.assertEqual((quick.quick, quick.seeds, quick.workdir), (True, (0, 1), "/tmp/report"))
    self.assertEqual(dict(quick.overrides), {"model.d_model": 48, "train.steps": 7})
    self.assertEqual((full.quick, full.seeds, full.runs_dir, dict(full.overrides)),
                     (False, (), "/tmp/models", {}))


  def test_batched_switch_reaches_the_settings_of_an_algorithmic_study(self):
    import launch  # pylint: disable=g-import-not-at-top
    from experiments import kazemnejad_suite  # pylint: disable=g-import-not-at-top
    from experiments.algorithmic import model_runs  # pylint: disable=g-import-not-at-top
    from pejax import cli  # pylint: disable=g-import-not-at-top
    seen = {}

    def record_options(options):
      seen.setdefault("options", []).append(options.batched)

    with mock.patch.object(kazemnejad_suite, "run", record_options):
      for value in ("on", "OFF", "auto", ""):
        launch.run(["launch.py", "--study=kazemnejad_suite",
                    f"--config.study.batched={value}", "--workdir=/tmp/report"])
    self.assertEqual(seen["options"], [True, False, None, None])
    with self.assertRaisesRegex(cli.CommandLineError,
                                r"--config.study.batched=sometimes: must be on, off or auto"):
      launch.run(["launch.py", "--study=kazemnejad_suite", "--config.study.batched=sometimes"])
    with self.assertRaisesRegex(cli.CommandLineError, "--config.study.batched only applies"):
      launch.run(["launch.py", "--study=extrapolation", "--config.study.batched=on"])
    # The settings the models are trained with: the switch wins over the platform default.
    class Stop(Exception):
      pass

    def record_settings(base, settings, **unused):
      del base, unused
      seen["settings"] = settings
      raise Stop

    with mock.patch.object(model_runs, "run_models", record_settings):
      with self.assertRaises(Stop):
        launch.run(["launch.py", "--study=kazemnejad_suite", "--quick", "--pes=rope",
                    "--config.study.batched=on",
                    f"--workdir={self.create_tempdir().full_path}/r"])
    self.assertTrue(seen["settings"].trains_together)


class ReadablePlotsTest(absltest.TestCase):

  def test_log_axis_under_a_decade_gets_several_round_labelled_ticks(self):
    from pejax.eval import report  # pylint: disable=g-import-not-at-top
    for low, high in ((8.5, 19.5), (6.7, 27.2), (1.02, 1.3), (120.0, 9000.0)):
      ticks = report.readable_log_ticks(low, high)
      self.assertGreaterEqual(len(ticks), 3, (low, high))
      self.assertLessEqual(len(ticks), 8, (low, high))
      self.assertTrue(all(low * 0.99 <= t <= high * 1.01 for t in ticks), (low, high, ticks))
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    fig, ax = plt.subplots()
    ax.plot([128, 2048], [8.5, 19.5])
    ax.set_yscale("log")
    report.set_readable_log_ticks(ax.yaxis, 8.5, 19.5)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    plt.close(fig)
    self.assertEqual(labels, ["10", "12", "15"])
    self.assertGreaterEqual(len(labels), 3)

  def test_plot_curves_log_y_uses_the_readable_ticks(self):
    from pejax.eval import report  # pylint: disable=g-import-not-at-top
    path = pathlib.Path(self.create_tempdir().full_path) / "p.png"
    with mock.patch.object(report, "set_readable_log_ticks") as ticks:
      eval_report.plot_curves(path, {"rope + yarn x4": [(128, 8.5), (2048, 19.5, 18.0, 21.0)]},
                               xlabel="L", ylabel="ppl", logx=True, logy=True)
    self.assertEqual(ticks.call_args.args[1:], (8.5, 21.0))
    self.assertTrue(path.exists())

  def test_plot_panels_draws_one_panel_per_group_and_hides_the_spare_axes(self):
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    path = pathlib.Path(self.create_tempdir().full_path) / "panels.png"
    panels = {f"pe{i}": {"plain": [(1, 1.0), (2, 0.5, 0.4, 0.6)], "randomized": [(1, 0.9)]}
              for i in range(5)}
    panels["none"] = {"plain": [(1, float("nan")), (2, 0.1)]}
    with mock.patch.object(plt, "close") as close:
      eval_report.plot_panels(path, panels, xlabel="size", ylabel="acc", title="t", vline=1.5,
                               styles={"randomized": "--"}, colors={"plain": "tab:blue"})
    fig = close.call_args.args[0]
    visible = [ax for ax in fig.axes if ax.get_visible()]
    self.assertEqual([ax.get_title() for ax in visible], list(panels))
    self.assertLen(fig.axes, 8)  # 6 panels in 2 rows of 4: two hidden.
    self.assertEqual(visible[0].lines[1].get_linestyle(), "--")
    self.assertEqual(path.read_bytes()[:4], b"\x89PNG")
    plt.close(fig)
    with self.assertRaisesRegex(ValueError, "panels must not be empty"):
      eval_report.plot_panels(path, {}, xlabel="x", ylabel="y")
    with self.assertRaisesRegex(ValueError, "ncols must be >= 1, got 0"):
      eval_report.plot_panels(path, panels, xlabel="x", ylabel="y", ncols=0)


if __name__ == "__main__":
  absltest.main()

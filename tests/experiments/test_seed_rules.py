"""The verdict rules over seeds (experiments/study/expectations.py, issue 45), on hand-made
records: every seed, the bootstrap interval, seeds that split, the floor, missing seeds."""

import pytest

from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import study_options


def test_a_threshold_claim_needs_every_seed():
  # The extrapolation case a reviewer found: the mean passes x2, two of three seeds do not.
  ratios = [1.91, 1.93, 2.55]
  assert sum(ratios) / 3 >= 2.0
  assert expectations.every_seed(ratios, lambda r: r >= 2.0) is False
  assert expectations.every_seed([2.1, 2.0, 2.5], lambda r: r >= 2.0) is True
  assert expectations.every_seed([2.1, None, float("nan")], lambda r: r >= 2.0) is True
  assert expectations.every_seed([None, float("nan")], lambda r: r >= 2.0) is None


def test_a_beats_b_on_every_seed():
  c = expectations.compare_over_seeds([0.9, 0.8, 0.85], [0.6, 0.7, 0.8],
                                      higher_is_better=True)
  assert (c.held, c.rule) == (True, "every seed")
  assert c.differences == pytest.approx((0.3, 0.1, 0.05))
  # Lower is better (perplexity): A's lower values win.
  c = expectations.compare_over_seeds([8.1, 8.3], [8.6, 9.0], higher_is_better=False)
  assert (c.held, c.rule) == (True, "every seed")


def test_seeds_that_split_do_not_hold_even_when_the_mean_favours_a():
  c = expectations.compare_over_seeds([0.95, 0.50, 0.52], [0.55, 0.53, 0.51],
                                      higher_is_better=True)
  assert sum([0.95, 0.50, 0.52]) > sum([0.55, 0.53, 0.51])  # The mean alone would say held.
  assert (c.held, c.rule) == (False, "seeds split")
  low, high = c.interval
  assert low < 0 < high
  assert "95% interval" in c.text()


def test_a_bootstrap_interval_that_excludes_zero_holds():
  # Ten seeds, one against: the interval of the mean difference stays above 0.
  a = [1.0] * 9 + [0.0]
  b = [0.0] * 9 + [0.2]
  c = expectations.compare_over_seeds(a, b, higher_is_better=True)
  assert (c.held, c.rule) == (True, "bootstrap")
  assert c.interval[0] > 0
  # Reproducible from its seed.
  assert expectations.compare_over_seeds(a, b, higher_is_better=True).interval == c.interval


def test_every_seed_against_does_not_hold():
  c = expectations.compare_over_seeds([1.0, 2.0], [3.0, 4.0], higher_is_better=True)
  assert (c.held, c.rule) == (False, "every seed against")


def test_both_sides_at_the_floor_is_not_measurable_and_counts_neither_way():
  c = expectations.compare_over_seeds([0.0, 0.0, 0.0], [0.0, 0.0, 0.0],
                                      higher_is_better=True, floor=0.0)
  assert (c.held, c.rule, c.at_floor) == (None, "floor", True)
  # At chance (0.5 per-token accuracy) on both sides: the same.
  c = expectations.compare_over_seeds([0.49, 0.5], [0.47, 0.5], higher_is_better=True,
                                      floor=0.5)
  assert c.at_floor
  # One side above the floor: decided.
  c = expectations.compare_over_seeds([0.0, 0.3], [0.0, 0.0], higher_is_better=True,
                                      floor=0.0)
  assert (c.held, c.rule) == (False, "seeds split")
  v = expectations.verdict("A beats B", "every seed", "0 vs 0", lambda: expectations
                           .compare_over_seeds([0.0], [0.0], higher_is_better=True, floor=0.0))
  assert v.held is None and v.at_floor and v.status == expectations.FLOOR
  assert v.to_json()["status"] == "not measurable (floor)"
  assert expectations.verdict("x", "y", "z", lambda: expectations.AT_FLOOR).status == (
      expectations.FLOOR)


def test_paired_seeds_leave_out_a_seed_missing_on_either_side():
  c = expectations.compare_over_seeds([0.9, None, 0.8], [0.5, 0.9, float("nan")],
                                      higher_is_better=True)
  assert (c.held, c.rule, c.differences) == (True, "every seed", pytest.approx((0.4,)))
  assert expectations.compare_over_seeds([None], [0.1], higher_is_better=True).rule == "no seeds"
  with pytest.raises(ValueError, match=r"as many values in a \(2\) as in b \(3\)"):
    expectations.compare_over_seeds([1, 2], [1, 2, 3], higher_is_better=True)


def test_unpaired_arms_compare_every_value_with_every_value():
  c = expectations.compare_over_seeds([0.9, 0.8], [0.5, 0.6, 0.7], higher_is_better=True,
                                      paired=False)
  assert (c.held, c.rule) == (True, "every seed")
  c = expectations.compare_over_seeds([0.9, 0.6], [0.5, 0.7], higher_is_better=True,
                                      paired=False)
  assert c.held is False and c.rule == "seeds split"


def test_the_report_counts_floors_neither_way():
  report = markdown_report.Report("T", study="x", options=study_options.StudyOptions())
  report.add_verdict(expectations.verdict("held one", "c", "m", lambda: True))
  report.add_verdict(expectations.verdict("failed one", "c", "m", lambda: False))
  report.add_verdict(expectations.verdict("floor one", "c", "m", lambda: expectations.AT_FLOOR))
  text = report.verdict_section()
  assert "**not measurable (floor)**" in text
  assert ("1 of 2 expectations held at this scale (1 not measurable at the floor, counted "
          "neither way).") in text


def test_the_algorithmic_comparison_calls_zero_against_zero_the_floor():
  from experiments.algorithmic import seed_comparison  # pylint: disable=g-import-not-at-top
  from experiments.study import seed_statistics  # pylint: disable=g-import-not-at-top
  zeros = seed_statistics.spread([0.0, 0.0, 0.0])
  assert seed_comparison.compare({"a": zeros}, {"b": zeros}, floor=0.0) is expectations.AT_FLOOR
  assert seed_comparison.compare({"a": zeros}, {"b": zeros}) is False  # Without a floor.
  some = seed_statistics.spread([0.0, 0.2, 0.3])
  assert seed_comparison.compare({"a": some}, {"b": zeros}, floor=0.0) is False  # Overlap.
  v = seed_comparison.spread_verdict("a beats b", {"a": zeros}, {"b": zeros}, "c", floor=0.0)
  assert v.status == expectations.FLOOR and v.note == ""


def test_one_model_per_arm_is_indicative():
  report = markdown_report.Report("T", study="x", options=study_options.StudyOptions())
  report.models_per_arm(3)
  assert report.indicative == ""
  report.models_per_arm(1)
  report.add_verdict(expectations.verdict("claim", "c", "m", lambda: True))
  text = report.verdict_section()
  assert "indicative (one model per arm, no seed spread): held" in text
  assert "a run with several seeds per arm decides" in text
  quick = markdown_report.Report("T", study="x", options=study_options.StudyOptions(quick=True))
  quick.models_per_arm(1)
  assert quick.indicative == "quick mode"  # Its own label stays.

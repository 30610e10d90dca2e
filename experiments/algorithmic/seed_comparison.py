"""Verdicts of the algorithmic studies: "A beats B" beyond the seed spread.

A claim holds only when every seed of A is above every seed of B (the min-max ranges do not
overlap) and the medians differ by at least :data:`MARGIN`; when every seed of both sides is at
the floor (chance), it is not measurable. The studies' verdicts take each trained seed with the
accuracy it measured, fit or not (:func:`group_verdict`'s ``"raw"`` view); the
``"trainability"`` view counts a seed that did not fit 0.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from experiments.algorithmic import convergence
from experiments.algorithmic import seed_summary
from experiments.study import expectations
from experiments.study import table_cells


MARGIN = 0.02  # Medians must differ by at least this much on top of separated seed ranges.


def compare(winners: Mapping[str, Mapping[str, Any]], losers: Mapping[str, Mapping[str, Any]],
            *, margin: float = MARGIN, floor: Optional[float] = None) -> Any:
  """Whether every winner beats every loser beyond the seed spread.

  Args:
    winners: label -> spread (:func:`~experiments.study.seed_statistics.spread`) of the compared number, higher is better.
    losers: the same for the expected losers.
    margin: the least difference of medians.
    floor: the value at which the measurement cannot tell variants apart (0 for an exact-match
      accuracy); when every seed of every side is at or below it the claim is not measurable.

  Returns:
    ``True`` when for each pair the winner's smallest seed value is above the loser's largest
    and the medians differ by ``margin``; ``False`` otherwise (:func:`why_not` says why);
    ``None`` when a side has no value; :data:`~experiments.study.expectations.AT_FLOOR` when
    every seed of both sides is at the floor (the verdict then says "not measurable (floor)"
    and counts neither way).
  """
  present = lambda side: {k: s for k, s in side.items() if s and s.get("median") is not None}
  won, lost = present(winners), present(losers)
  if not won or not lost:
    return None
  if floor is not None and all(s["max"] <= floor for s in [*won.values(), *lost.values()]):
    return expectations.AT_FLOOR
  return not why_not(won, lost, margin=margin)


def why_not(winners: Mapping[str, Mapping[str, Any]], losers: Mapping[str, Mapping[str, Any]],
            *, margin: float = MARGIN, digits: int = 3) -> str:
  """Why :func:`compare` fails: the first (winner, loser) pair that breaks the criterion.

  Args:
    winners: label -> spread of the expected winners.
    losers: label -> spread of the expected losers.
    margin: the least difference of medians.
    digits: decimals of the numbers quoted.

  Returns:
    One sentence, e.g. ``"Reason: sinusoidal is ahead of none (medians 0.210 vs 0.105)."``;
    empty when the comparison holds or cannot be made. This is the criterion itself:
    :func:`compare` holds exactly when it is empty.

  Raises:
    ValueError: for ``margin <= 0`` (a loser level with the winner would count as beaten).
  """
  if not margin > 0:
    raise ValueError(f"margin must be > 0, got {margin}")
  f = lambda x: table_cells.fmt(x, digits)
  for w_name, w in winners.items():
    for l_name, l in losers.items():
      if not w or not l or w.get("median") is None or l.get("median") is None:
        continue
      if l["median"] >= w["median"]:
        return (f"Reason: {l_name} is ahead of {w_name} or level with it (medians "
                f"{f(l['median'])} vs {f(w['median'])}).")
      if (w["n"] > 1 or l["n"] > 1) and not w["min"] > l["max"]:
        return (f"Reason: the seeds overlap: {w_name}'s lowest seed {f(w['min'])} is not above "
                f"{l_name}'s highest {f(l['max'])}.")
      if w["median"] < l["median"] + margin:
        # Enough digits that the lead printed is under the margin (0.0195, not "0.020 < 0.02").
        lead, shown = w["median"] - l["median"], digits
        while float(table_cells.fmt(lead, shown)) >= margin and shown < 9:
          shown += 1
        return (f"Reason: {w_name} leads {l_name} by {table_cells.fmt(lead, shown)} in the "
                f"median, less than the {margin:g} margin.")
  return ""


def describe(spreads: Mapping[str, Mapping[str, Any]], digits: int = 3) -> str:
  return ", ".join(f"{k} {table_cells.median_cell(v, digits)}" for k, v in spreads.items())


def cap_text(max_steps: int, rescue_steps: int = 0) -> str:
  """``"6000 steps"``, or ``"6000 steps, or 12000 in a second run"`` (a recipe's cap and
  ``Settings.rescue_steps``)."""
  return f"{max_steps} steps" + (f", or {rescue_steps} in a second run" if rescue_steps else "")


def group_verdict(expectation: str, entries: Mapping[str, Mapping[str, Any]],
                  winners: Sequence[str], losers: Sequence[str], recipe: convergence.Recipe,
                  *, key: str = "ood", rescue_steps: int = 0,
                  view: str = "raw") -> expectations.Verdict:
  """The claim "every winner beats every loser on ``key``", checked beyond the seed spread.

  Two views (issue 45; :mod:`~experiments.algorithmic.seed_summary`):

  * ``"raw"`` (the studies' verdicts): every trained seed enters with the OOD accuracy it
    measured, fit or not, so the verdict is about length generalization; the fit rates are
    stated in the note. When every seed of both sides is at or below the task's chance level
    (``entry["chance"]``, 0 when absent) the claim is not measurable (floor).
  * ``"trainability"``: variants that fit in a majority of their seeds enter with ``key`` over
    the seeds that fit; the others with ``key`` over every seed, a seed that did not fit counted
    0 (a model that did not learn the task is given no credit beyond it).

  Args:
    expectation: the published claim.
    entries: variant -> :func:`summarize_variant` entry.
    winners: expected winners.
    losers: expected losers.
    recipe: the convergence recipe (for the note).
    key: the compared spread (``ood``, ``ood_2x`` or ``ood_far``).
    rescue_steps: the cap of the second runs (for the note), 0 for none.
    view: ``"raw"`` or ``"trainability"``.

  Returns:
    The :class:`~experiments.study.expectations.Verdict`.
  """
  if view not in seed_summary.VIEWS:
    raise ValueError(f"view must be one of {seed_summary.VIEWS}, got {view!r}")
  variants = list(winners) + list(losers)
  unfit = [v for v in variants if not seed_summary.comparable(entries[v])]
  fit_text = ("did not fit (>= {threshold:g} held-out in-distribution within {cap}) in a "
              "majority of seeds (best in-distribution: {best})").format(
                  threshold=recipe.fit_threshold, cap=cap_text(recipe.max_steps, rescue_steps),
                  best=", ".join(f"{v} {table_cells.median_cell(entries[v]['best_in_dist'], 3)}"
                                 for v in unfit))
  if view == "raw":
    won = {v: entries[v].get(key + seed_summary.RAW) for v in winners}
    lost = {v: entries[v].get(key + seed_summary.RAW) for v in losers}
    chances = [entries[v]["chance"] for v in variants if entries[v].get("chance") is not None]
    floor = max(chances) if chances else 0.0
    note = (f"{', '.join(unfit)} {fit_text}; their seeds enter with the accuracy they measured."
            if unfit else "")
    criterion = (f"every seed of each of {', '.join(winners)} above every seed of each of "
                 f"{', '.join(losers)} ({key.replace('_', ' ')} accuracy as measured, every "
                 f"trained seed, fit or not) and medians >= {MARGIN:g} apart; every seed of both "
                 f"sides at or below chance ({table_cells.fmt(floor, 3)}): not measurable "
                 "(floor)")
    return expectations.verdict(
        expectation, criterion, describe({**won, **lost}) or "no model was trained",
        lambda: compare(won, lost, floor=floor), note=note,
        note_if_not_held=why_not(won, lost))
  pick = lambda v: (entries[v][key] if seed_summary.comparable(entries[v])
                    else entries[v][key + seed_summary.STRICT])
  won = {v: pick(v) for v in winners}
  lost = {v: pick(v) for v in losers}
  note = ""
  if unfit:
    note = (f"{', '.join(unfit)} {fit_text}; compared with every seed, a seed that did not fit "
            "counted 0.")
  return expectations.verdict(
      expectation,
      f"every seed of each of {', '.join(winners)} above every seed of each of "
      f"{', '.join(losers)} ({key.replace('_', ' ')} exact match, seeds that fit; a variant "
      f"that fit in no majority counts its unfit seeds 0) and medians >= {MARGIN:g} apart; "
      "every seed of both sides at 0: not measurable (floor)",
      describe({**won, **lost}) or "no model was trained",
      lambda: compare(won, lost, floor=0.0), note=note, note_if_not_held=why_not(won, lost))


def spread_verdict(expectation: str, winners: Mapping[str, Mapping[str, Any]],
                   losers: Mapping[str, Mapping[str, Any]], criterion: str,
                   note: str = "", floor: Optional[float] = None) -> expectations.Verdict:
  """A claim on already computed spreads (e.g. suite means, MRR), checked by :func:`compare`
  (``floor``: the value every seed of both sides must exceed for the claim to be measurable)."""
  return expectations.verdict(expectation, criterion, describe({**winners, **losers}),
                              lambda: compare(winners, losers, floor=floor), note=note,
                              note_if_not_held=why_not(winners, losers))

"""What the algorithmic length-generalization studies share (not a study itself).

An algorithmic study is a :class:`~experiments.algorithmic.sweep.Settings` (tasks with their
training and test sizes, PE variants, seeds, a convergence recipe) plus its published claims;
:func:`experiments.algorithmic.suite_study.run_study` runs it:

* ``sweep``: tasks, PE variants (plain and ``+randomized``), seeds, the recipe.
* ``convergence``: train a task model until it fits in-distribution, or a step cap; cached.
* ``model_runs``: every (task, variant, seed), trained (or reused) and scored, seed-major.
* ``scoring``: exact match (or per-token accuracy) at every test size; cached.
* ``seed_summary``: summaries over seeds; a seed that did not fit counts 0 out of distribution.
* ``seed_comparison``: verdicts "A beats B" beyond the seed spread.
* ``sweep_progress``: how far a long run is (``--progress``), from the records.
* ``report_sections``: the report sections every algorithmic study shares.
* ``suite_study``: one study run (every model, a shard, or its progress), then its report.
* ``leaderboard``: the PE x task-family table of experiments/results/README.md, from the
  committed results.

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843. Kazemnejad et al., "The Impact of Positional Encoding on Length
  Generalization in Transformers", NeurIPS 2023, arXiv:2305.19466.
"""

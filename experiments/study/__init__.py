"""What every study is made of (not a study itself; the studies are listed in
:mod:`experiments.studies`).

A study (``experiments/<name>.py``) sweeps settings, trains small models, measures something,
checks published expectations against the numbers and writes one self-contained report into its
workdir. Its pieces, one concept per module:

* ``study_options``: :class:`StudyOptions` (what a run was asked for), the study config file,
  config overrides, ``python -m experiments.<name>`` = ``launch.py --study=<name>``.
* ``trained_runs``: train a decoder once and reuse it by its settings; load it back.
* ``pe_capabilities``: which PEs a study runs, selected by capability from the registry.
* ``result_cache``: a JSON cache keyed by what a value depends on.
* ``seed_statistics``: the spread of a number over seeds.
* ``expectations``: verdicts (held / did not hold / not measurable).
* ``table_cells``: numbers as table cells, markdown tables.
* ``markdown_report``: ``report.md`` and ``results.json``.

Command line: ``python launch.py --study=<name>`` (or ``python -m experiments.<name>``, the same
command; or ``--config=experiments/configs/<name>.py``)::

    --quick                        a few minutes on 2 CPU cores (fewer seeds, steps and lengths)
    --workdir                      report directory (default runs/<study>)
    --seeds=0,1,2                  seeds (default: the study's)
    --shard=I/N                    algorithmic studies: train only every N-th model from the I-th
                                   (0-based), no report; N processes on one runs directory
    --progress                     algorithmic studies: how far the run is (models done,
                                   one-core minutes, time left), from the records; no training
    --config.study.runs_dir=DIR    trained models (default runs/<study>; the convergence
                                   studies: <workdir>/models, whose records git keeps)
    --steps=N, --config.<path>=V   overrides of every base model, e.g. --config.model.d_model=256
"""

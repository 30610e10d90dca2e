"""The studies: ``python launch.py --study=<name>`` runs ``experiments/<name>.py``.

Each name is a module of this package with a ``run(options)`` entry (options: a
:class:`~experiments.study.study_options.StudyOptions`) and a config file
``experiments/configs/<name>.py``. A new study is one module, one config file and one line here.

Not studies: ``experiments/study/`` and ``experiments/algorithmic/`` (what the studies are made
of) and ``experiments/image_grid/`` (a separate image experiment on a tiny ViT with its own flags,
``python -m experiments.image_grid``; it trains no pejax decoder, so it takes no experiment config).
"""

STUDIES = (
    "extrapolation",
    "context_extension",
    "length_generalization",
    "passkey_scaling",
    "training_curves",
    "gallery",
    "ruoss_suite",
    "kazemnejad_suite",
    "content_tasks",
    "streaming_llm",
    "kv_quantization",
    "ruler_retrieval",
)

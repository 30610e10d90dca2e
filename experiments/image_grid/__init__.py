"""Image study: 2-D positional encodings of a tiny ViT at a larger patch grid than in training.

Run ``python -m experiments.image_grid --quick`` (see ``__main__.py``); the pieces are importable:
:mod:`experiments.image_grid.digits` (data), :mod:`experiments.image_grid.vit` (model),
:mod:`experiments.image_grid.study` (train / evaluate) and :mod:`experiments.image_grid.report`.
"""

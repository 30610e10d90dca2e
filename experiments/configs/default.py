"""The default experiment: a 2-layer, d=128 RoPE decoder on the built-in stdlib corpus.

600 steps at L=128 (~2 minutes on 2 CPU cores), evaluated at 1, 2, 4, 8 and 16 x 128. The config
itself lives in the package (``pejax.experiment_config.get_config``: an installed pejax has no
``experiments/``, and ``pejax-launch`` uses it); every field and its comment:
``pejax/experiment_config.py`` (``python launch.py --help`` lists them).
"""

from pejax import experiment_config


def get_config():
  return experiment_config.get_config()

"""Training curves of sinusoidal, RoPE and ALiBi decoders on the same budget.

`python launch.py --study=training_curves [--quick]` (the same as
`python launch.py --config=experiments/configs/training_curves.py`);
the study is experiments/training_curves.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("training_curves")

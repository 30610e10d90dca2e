"""Copy / reverse past the training size, every PE + randomized positions.

`python launch.py --study=length_generalization [--quick]` (the same as
`python launch.py --config=experiments/configs/length_generalization.py`);
the study is experiments/length_generalization.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("length_generalization")

"""Length extrapolation of every PE (Press et al. 2022, "Train Short, Test Long").

`python launch.py --study=extrapolation [--quick]` (the same as
`python launch.py --config=experiments/configs/extrapolation.py`);
the study is experiments/extrapolation.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("extrapolation")

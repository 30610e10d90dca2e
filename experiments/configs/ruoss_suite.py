"""The ruoss_suite study (experiments/ruoss_suite.py).

`python launch.py --study=ruoss_suite [--quick]` (the same as
`python launch.py --config=experiments/configs/ruoss_suite.py`);
the study is experiments/ruoss_suite.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("ruoss_suite")

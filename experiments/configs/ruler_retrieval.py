"""RULER retrieval beyond the training length: RoPE, ALiBi, NoPE, FoX, RNoPE-SWA, PI and YaRN.

`python launch.py --study=ruler_retrieval [--quick]` (the same as
`python launch.py --config=experiments/configs/ruler_retrieval.py`);
the study is experiments/ruler_retrieval.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("ruler_retrieval")

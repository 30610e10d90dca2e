"""RoPE context extension: zero-shot frequency scalings and a short fine-tune.

`python launch.py --study=context_extension [--quick]` (the same as
`python launch.py --config=experiments/configs/context_extension.py`);
the study is experiments/context_extension.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("context_extension")

"""Passkey retrieval beyond the training length under each RoPE scaling.

`python launch.py --study=passkey_scaling [--quick]` (the same as
`python launch.py --config=experiments/configs/passkey_scaling.py`);
the study is experiments/passkey_scaling.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("passkey_scaling")

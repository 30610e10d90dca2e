"""The positional encodings themselves (heatmaps, decay, buckets), no training.

`python launch.py --study=gallery [--quick]` (the same as
`python launch.py --config=experiments/configs/gallery.py`); the study is experiments/gallery.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("gallery")

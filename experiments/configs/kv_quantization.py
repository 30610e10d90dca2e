"""Perplexity with a float32 / bfloat16 / int8 / fp8 KV cache at 1-8x the training length.

`python launch.py --study=kv_quantization [--quick]` (the same as
`python launch.py --config=experiments/configs/kv_quantization.py`);
the study is experiments/kv_quantization.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("kv_quantization")

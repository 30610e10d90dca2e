"""StreamingLLM: a 64K-token stream through a 1024-slot KV cache (window, sinks, full).

`python launch.py --study=streaming_llm [--quick]` (the same as
`python launch.py --config=experiments/configs/streaming_llm.py`);
the study is experiments/streaming_llm.py.
The study sets the PE, seed, data and evaluation of each model it trains; the other fields are the
base every model starts from, and the ones given on the command line override the study's own.
"""

from experiments.study import study_options


def get_config():
  return study_options.study_config("streaming_llm")

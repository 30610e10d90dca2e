"""RULER-style long-context tasks: seeded example generators and exact-match scorers.

Pure Python and NumPy (no JAX): :func:`generate` builds prompts of a task fitted to a length in
tokens of any tokenizer, up to 128K tokens and beyond; :func:`score` / :func:`score_examples`
score a model's continuations with RULER's metrics. 11 of RULER's 13 tasks: the NIAH family
(single, multi-key, multi-value, multi-query), variable tracking (``vt``), common words
(``cwe``) and frequent words (``fwe``), on built-in data only. docs/ruler.md lists the
deviations from RULER.

Example::

  from pejax.eval import ruler

  examples = ruler.generate("niah_single_1", length=4096, tokenizer=ruler.ByteTokenizer(),
                            num_examples=4, seed=0)
  predictions = [model_continuation(e.input) for e in examples]
  ruler.score_examples(examples, predictions)  # {"niah_single_1": 0.75}

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654
"""

from pejax.eval.ruler.example import Example
from pejax.eval.ruler.generation import generate
from pejax.eval.ruler.scoring import score
from pejax.eval.ruler.scoring import score_examples
from pejax.eval.ruler.scoring import string_match_all
from pejax.eval.ruler.scoring import string_match_part
from pejax.eval.ruler.task_spec import TaskSpec
from pejax.eval.ruler.tasks import TASKS
from pejax.eval.ruler.tasks import task_names
from pejax.lazy_exports import lazy_exports

# pejax's byte-level tokenizer, loaded on first use (pejax.hf is not needed otherwise).
__getattr__, __dir__ = lazy_exports(__name__, {"ByteTokenizer": "pejax.hf.tokenizer"})

__all__ = (
    "ByteTokenizer",
    "Example",
    "TASKS",
    "TaskSpec",
    "generate",
    "score",
    "score_examples",
    "string_match_all",
    "string_match_part",
    "task_names",
)

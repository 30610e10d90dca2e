"""Byte-level data (vocabulary 256): corpora, synthetic tasks, batch iterators, eval windows.

* `tokenize_corpus(corpus, tokenizer)`: the same corpora with a pretrained model's vocabulary;
  `passkey_text_example`: natural-language passkey prompts with that tokenizer.

* `load_corpus(name)`: "stdlib" (the Python standard library's `.py` sources, split by file) or
  any UTF-8 text file / directory.
* Synthetic length-generalization tasks: copy, reverse, passkey retrieval, addition, the
  Ruoss et al. and Kazemnejad et al. suites, flip-flop, multi-query associative recall,
  selective copy, counting (`TASK_NAMES`; see `pejax.data.synthetic`).
* `make_train_iterator(config)`: checkpointable batch iterators (`get_state` / `set_state`).
* `nonoverlapping_windows`, `sliding_windows`: the ALiBi paper's evaluation protocols.
"""

from pejax.data.addition import addition_example
from pejax.data.addition import solve_addition
from pejax.data.batch_iterator import BatchIterator
from pejax.data.copy_reverse import copy_example
from pejax.data.copy_reverse import reverse_example
from pejax.data.copy_reverse import solve_copy
from pejax.data.copy_reverse import solve_reverse
from pejax.data.corpus import Corpus
from pejax.data.corpus import FILE_SEPARATOR
from pejax.data.corpus import is_validation_file
from pejax.data.corpus import split_files
from pejax.data.eval_windows import nonoverlapping_windows
from pejax.data.eval_windows import sliding_windows
from pejax.data.language_model import LanguageModelIterator
from pejax.data.passkey import passkey_example
from pejax.data.passkey import passkey_min_length
from pejax.data.passkey import solve_passkey
from pejax.data.passkey_text import passkey_text_example
from pejax.data.randomized_positions import RandomizedPositions
from pejax.data.registry import BUILTIN_CORPORA
from pejax.data.registry import is_task
from pejax.data.registry import load_corpus
from pejax.data.registry import make_train_iterator
from pejax.data.stdlib_corpus import load_stdlib_corpus
from pejax.data.stdlib_corpus import stdlib_source_files
from pejax.data.synthetic import TASK_NAMES
from pejax.data.synthetic import SyntheticTaskIterator
from pejax.data.synthetic import masked_bytes
from pejax.data.synthetic import max_size_for
from pejax.data.synthetic import solve
from pejax.data.synthetic import synthetic_batch
from pejax.data.synthetic import synthetic_examples
from pejax.data.synthetic_example import PAD_ID
from pejax.data.synthetic_example import SyntheticExample
from pejax.data.synthetic_example import encode_examples
from pejax.data.text_corpus import load_text_corpus
from pejax.data.tokenized_corpus import tokenize_corpus

__all__ = (
    "BUILTIN_CORPORA",
    "BatchIterator",
    "Corpus",
    "FILE_SEPARATOR",
    "LanguageModelIterator",
    "PAD_ID",
    "RandomizedPositions",
    "SyntheticExample",
    "SyntheticTaskIterator",
    "TASK_NAMES",
    "addition_example",
    "copy_example",
    "encode_examples",
    "is_task",
    "is_validation_file",
    "load_corpus",
    "load_stdlib_corpus",
    "load_text_corpus",
    "make_train_iterator",
    "masked_bytes",
    "max_size_for",
    "nonoverlapping_windows",
    "passkey_example",
    "passkey_min_length",
    "passkey_text_example",
    "reverse_example",
    "sliding_windows",
    "solve",
    "solve_addition",
    "solve_copy",
    "solve_passkey",
    "solve_reverse",
    "split_files",
    "stdlib_source_files",
    "synthetic_batch",
    "synthetic_examples",
    "tokenize_corpus",
)

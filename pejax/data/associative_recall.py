"""Multi-query associative recall (MQAR, Arora et al. 2023) as a byte text.

Size n = number of key-value pairs (1..52): distinct keys drawn from ``a-zA-Z``, values digits.
After ``|`` every key is queried once, in random order, and the value follows each query key;
only the values are scored (the query keys are given, under teacher forcing)::

    prompt  k1 v1 k2 v2 ... kn vn | q1
    answer  v(q1) q2 v(q2) ... qn v(qn)      (scored: the values)
    suffix  \\n

Text 4n + 2 bytes.

References:
  Arora et al., "Zoology: Measuring and Improving Recall in Efficient Language Models", ICLR
  2024, arXiv:2312.04927.
"""

from __future__ import annotations

import string

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

KEYS = (string.ascii_lowercase + string.ascii_uppercase).encode()
SEPARATOR = b"|"
END = b"\n"


def mqar_example(rng: np.random.Generator | int, *,
                 length: int) -> synthetic_example.SyntheticExample:
  """``length`` key-value pairs, then every key queried once.

  Args:
    rng: a numpy Generator, or a seed.
    length: pairs n in [1, 52].

  Returns:
    The example; ``scored`` marks the values in the answer.

  Raises:
    ValueError: for ``length`` outside [1, 52].
  """
  n = arg_checks.check_positive_int("length", length)
  if n > len(KEYS):
    raise ValueError(f"length of mqar must be <= {len(KEYS)} (distinct keys), got {length}")
  rng = np.random.default_rng(rng)
  keys = [KEYS[i:i + 1] for i in rng.choice(len(KEYS), size=n, replace=False)]
  values = {k: str(int(rng.integers(0, 10))).encode() for k in keys}
  order = [keys[i] for i in rng.permutation(n)]
  context = b"".join(k + values[k] for k in keys)
  answer = bytearray(values[order[0]])
  for k in order[1:]:
    answer += k + values[k]
  scored = tuple(i % 2 == 0 for i in range(len(answer)))
  return synthetic_example.SyntheticExample(context + SEPARATOR + order[0], bytes(answer), END,
                                            scored=scored, info={"pairs": n})


def solve(text: bytes) -> bytes:
  """The values of every query of an MQAR text (``context|q1 v1 q2 v2 ...``), in order.

  Raises:
    ValueError: if the text has no ``|`` or a query key is not in the context.
  """
  if SEPARATOR not in text:
    raise ValueError(f"an MQAR text has a '|' after the pairs, got {text[:40]!r}")
  context, queries = text.rstrip(END).split(SEPARATOR)
  table = {context[i]: context[i + 1:i + 2] for i in range(0, len(context), 2)}
  try:
    return b"".join(table[q] for q in queries[0::2])
  except KeyError as e:
    raise ValueError(f"query key {chr(e.args[0])!r} is not in the context") from None


# name -> (generator, smallest size, (a, b): text <= a n + b bytes).
TASKS = {"mqar": (mqar_example, 1, (4, 2))}

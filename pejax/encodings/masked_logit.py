"""The logit of a masked (query, key) pair, shared by every attention path of pejax.

``MASKED = -1e30`` rather than ``-inf``: finite, so a query row that sees no key at all gives
finite (if meaningless) softmax weights instead of NaN, and ``exp(MASKED - m)`` is exactly 0 for
any row maximum ``m`` a real logit reaches; ``MASKED / 2`` separates "saw a key" from "saw none"
(:mod:`pejax.nn.attention.core`). Defined here, in the lowest layer, so that the pure
transforms (PaTH, stick-breaking) and the attention kernels of :mod:`pejax.nn` agree on it.
"""

MASKED = -1e30

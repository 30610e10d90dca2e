"""Makes ``fuzz_support`` (the shared strategies and oracle) importable by the fuzz tests.

The suite runs with ``--import-mode=importlib``, which does not put test directories on
``sys.path``.
"""

import pathlib
import sys

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)

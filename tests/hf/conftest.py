"""Makes ``fixture_cases`` (the committed tiny HF checkpoints) importable by the hf tests.

pytest runs with ``--import-mode=importlib``, which does not put a test's directory on
``sys.path``.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)

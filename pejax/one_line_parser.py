"""An ``argparse.ArgumentParser`` whose usage errors are one line, exit status 2.

The ``python -m pejax.<tool>`` commands (``sample``, ``hf.export``) share it, so that every
command-line mistake reads ``<prog>: error: ...`` as in :mod:`pejax.cli`.
"""

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
  """An ``ArgumentParser`` whose usage errors are one line (``prog: error: ...``), exit 2."""

  def error(self, message: str):
    self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")

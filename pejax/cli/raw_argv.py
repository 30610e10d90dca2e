"""A flag's values read from the raw command line, before the flags are defined.

``--pe_module`` (its PE must be registered before ``--pe`` and the ``--config.pe.*`` fields are
defined), ``--config`` (checked before ml_collections loads it) and ``--workdir`` (a run's
recorded PE modules) are needed that early.
"""

from __future__ import annotations

from typing import Sequence


def raw_flag_values(argv: Sequence[str], name: str) -> list[str]:
  """Every value of ``--<name>=v`` or ``--<name> v`` in ``argv``, in order.

  Args:
    argv: the command line (the program name first, or not).
    name: the flag's name, without dashes.

  Returns:
    The values given (empty when the flag is absent).
  """
  values = []
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      values.append(arg.split("=", 1)[1])
    elif arg == f"--{name}" and i + 1 < len(argv):
      values.append(argv[i + 1])
  return values

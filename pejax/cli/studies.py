"""What a command line needs to know of the studies (injected: they live above the library).

The studies are the checkout's ``experiments/`` package, a floor above ``pejax``: ``launch.py``
passes :data:`experiments.study.study_command.STUDIES`; ``pejax-launch`` and ``python -m pejax``
pass none, and ``--study`` there is an error saying to run it from a checkout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict


@dataclasses.dataclass(frozen=True)
class Studies:
  """The studies a command line can run.

  Attributes:
    names: the registered study names, sorted.
    config_file: ``name -> path`` of the study's ``get_config()`` file.
    run: ``(config, overrides, origins) -> None`` runs the study a resolved config names
      (``overrides``: ``path -> value`` set on the command line; ``origins``: ``path -> the
      flag that set it``); raises :class:`pejax.cli.CommandLineError` for a bad combination.
  """

  names: tuple[str, ...]
  config_file: Callable[[str], str]
  run: Callable[[Any, Dict[str, Any], Dict[str, str]], None]

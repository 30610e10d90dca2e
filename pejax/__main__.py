"""``python -m pejax`` and ``pejax-launch``: launch.py's command line without the studies.

:func:`main` re-executes with the allocator settings (:mod:`pejax.runtime_env`) before it imports
the command line, so that the imports (most of ``--help``'s time) are made once.
"""

from pejax import runtime_env


def main() -> None:
  """Runs :func:`pejax.cli.console_main` (the console script ``pejax-launch`` points here)."""
  runtime_env.apply_runtime_env()
  from pejax import cli  # pylint: disable=g-import-not-at-top
  cli.console_main()


if __name__ == "__main__":
  main()

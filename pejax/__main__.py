"""``python -m pejax``: the same as ``pejax-launch`` (:func:`pejax.cli.console_main`)."""

from pejax import cli

if __name__ == "__main__":
  cli.console_main()

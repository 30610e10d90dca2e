r"""The command line of pejax: ``launch.py`` in a checkout, ``pejax-launch`` / ``python -m pejax``.

One set of flags (``--config``, ``--config.<path>=value`` overrides and the aliases in
:data:`ALIASES`) and one error path: every mistake on the command line (a misspelt flag, an
illegal value, a config file that does not load, a module that does not import, a config field
that does not exist, an unknown study, PE or corpus) is one line ``<prog>: error: ...`` naming
the flag and the value, with a "did you mean" where one is close, and exit status 2, before
anything runs or any directory is made; ``--help`` exits 0. A run that started keeps its
documented exit statuses (:data:`pejax.train.experiment.EXIT_CODES`; a non-finite loss is 1).

Studies live in the checkout's ``experiments/`` package, a floor above the library: the caller
passes them in (:class:`Studies`; ``launch.py`` does). Without them ``--study`` says to run it
from a checkout.

    from pejax import cli
    cli.run(["pejax-launch", "--pe=alibi", "--steps=10"])   # raises CommandLineError
    cli.command_line(["pejax-launch", "--setps=10"], prog="pejax-launch")   # prints, returns 2
"""

from pejax.cli.command import command_line
from pejax.cli.command import console_main
from pejax.cli.command import main
from pejax.cli.command import run
from pejax.cli.command import USAGE
from pejax.cli.command_line_error import CommandLineError
from pejax.cli.config_file import load_config_file
from pejax.cli.config_file import PACKAGE_CONFIG
from pejax.cli.config_resolution import parse_flags
from pejax.cli.config_resolution import resolve_config
from pejax.cli.flag_definitions import ALIASES
from pejax.cli.flag_definitions import define_flags
from pejax.cli.flag_definitions import help_text
from pejax.cli.pe_modules import import_pe_module
from pejax.cli.studies import Studies

__all__ = [
    "ALIASES",
    "CommandLineError",
    "PACKAGE_CONFIG",
    "Studies",
    "USAGE",
    "command_line",
    "console_main",
    "define_flags",
    "help_text",
    "import_pe_module",
    "load_config_file",
    "main",
    "parse_flags",
    "resolve_config",
    "run",
]

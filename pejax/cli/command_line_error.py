"""One error path for the command line: every mistake becomes one line naming flag and value.

:class:`CommandLineError` is what the command line's own checks raise; :func:`from_flag_error`
rewrites absl's flag errors (``Unknown command line flag 'setps'. Did you mean: steps ?``,
``flag --steps=abc: invalid literal for int() with base 10: 'abc'``) into the same form:
``--setps=10: no such flag (did you mean --steps?)``, ``--steps=abc: not an integer``.
"""

from __future__ import annotations

import difflib
import re
from typing import Sequence

from absl import app
from absl import flags


class CommandLineError(app.UsageError):
  """A mistake on the command line: printed as one line ``<prog>: error: ...``, exit status 2."""

  def __init__(self, message: str):
    super().__init__(" ".join(str(message).split()))  # One line, whatever the source said.


def did_you_mean(value: str, choices: Sequence[str], *, prefix: str = "") -> str:
  """`` (did you mean 'x'?)`` for the closest of ``choices`` (case-insensitively), or ``""``.

  Args:
    value: what was given.
    choices: the valid values.
    prefix: written before the suggestion and not quoted (``"--"`` suggests a flag).

  Returns:
    The suggestion, with a leading space, or an empty string when nothing is close.
  """
  choices = [str(c) for c in choices]
  by_lower = {c.lower(): c for c in choices}
  close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1, cutoff=0.6)
  if not close:
    return ""
  best = by_lower[close[0]]
  return f" (did you mean {prefix}{best}?)" if prefix else f" (did you mean {best!r}?)"


# absl's "flag --name=value: reason" (IllegalFlagValueError).
_ILLEGAL_VALUE = re.compile(r"^flag --([\w.-]+)=(.*?): (.*)$", re.DOTALL)
_REASONS = (
    (re.compile(r"^invalid literal for int\(\) with base 10: .*$"), "not an integer"),
    (re.compile(r"^could not convert string to float: .*$"), "not a number"),
    (re.compile(r"^\('Non-boolean argument to boolean flag'.*$"), "not a boolean (true or false)"),
    (re.compile(r"^.* is not (an? .*)$"), r"must be \1"),  # "-1 is not a positive integer"
    (re.compile(r"^.* is not ([aeiou].*)$"), r"must be an \1"),  # "7 is not integer >= 8"
    (re.compile(r"^.* is not (.*)$"), r"must be a \1"),
)


def from_flag_error(error: flags.Error, flag_values: flags.FlagValues) -> CommandLineError:
  """The one-line :class:`CommandLineError` for an absl flag error.

  Args:
    error: what parsing the command line raised.
    flag_values: the flags it was parsed into (their names make the "did you mean").

  Returns:
    The error to raise in its place.
  """
  if isinstance(error, flags.UnrecognizedFlagError):
    given = error.flagvalue or f"--{error.flagname}"
    names = [n for n in flag_values if len(n) > 1]
    suggestion = did_you_mean(error.flagname, names, prefix="--")
    return CommandLineError(f"{given}: no such flag{suggestion}; --help lists them")
  text = " ".join(str(error).split())
  missing = re.match(r"^Missing value for flag (--[\w.-]+)$", text)
  if missing:
    return CommandLineError(f"{missing.group(1)}: needs a value ({missing.group(1)}=<value>)")
  match = _ILLEGAL_VALUE.match(text)
  if not match:
    return CommandLineError(text)
  name, value, reason = match.groups()
  if reason.startswith("value should be one of <"):
    choices = reason[len("value should be one of <"):].rstrip(">").split("|")
    reason = f"must be one of {', '.join(choices)}{did_you_mean(value, choices)}"
  else:
    for pattern, replacement in _REASONS:
      if pattern.match(reason):
        reason = pattern.sub(replacement, reason)
        break
  return CommandLineError(f"--{name}={value}: {reason}")

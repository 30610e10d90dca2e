"""Graceful stop on SIGINT / SIGTERM: the handler only sets a flag, the loop acts on it.

The training loop checks :attr:`StopRequest.requested` at every step boundary; when set it saves
a checkpoint of the last finished step and returns. A second SIGINT while a stop is pending
raises ``KeyboardInterrupt`` as usual, an escape hatch for a run stuck inside a step.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Sequence

from absl import logging

DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
  """Context manager installing flag-setting handlers for ``signums``; restores the old ones.

  Handlers can only be installed from the main thread; elsewhere the context manager does
  nothing but log a warning (the flag can still be set with :meth:`request`).

  Args:
    signums: Signals to handle.

  Attributes:
    requested: Whether a stop was requested.
    signal_name: Name of the signal that requested it (``"SIGTERM"``), or ``None``.
  """

  def __init__(self, signums: Sequence[int] = DEFAULT_SIGNALS):
    self.signums = tuple(signums)
    self.requested = False
    self.signal_name: str | None = None
    self._previous: dict[int, Any] = {}

  def request(self, name: str = "request") -> None:
    """Sets the flag (what the handler does).

    Args:
      name: Recorded as :attr:`signal_name`: the signal's name, or who asked for the stop.
    """
    self.requested = True
    self.signal_name = name

  def _handle(self, signum: int, frame: FrameType | None) -> None:
    del frame
    name = signal.Signals(signum).name
    if self.requested and signum == signal.SIGINT:
      raise KeyboardInterrupt(f"second {name} while a stop was pending")
    logging.warning("%s received: stopping at the next step boundary", name)
    self.request(name)

  def __enter__(self) -> StopRequest:
    if threading.current_thread() is not threading.main_thread():
      logging.warning("not in the main thread: SIGINT/SIGTERM will not stop training cleanly")
      return self
    for signum in self.signums:
      self._previous[signum] = signal.getsignal(signum)
      signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info: Any) -> None:
    for signum, previous in self._previous.items():
      signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    self._previous = {}

"""Periodic one-line training progress: step/total, loss, tokens/s, steps/s and ETA.

Plain text through a ``log_fn`` (``print`` by default; pass ``absl.logging.info`` under
``app.run``), no progress-bar dependency. Rates are measured over the window since the previous
line; the first window starts when the first step of the run has finished, so compilation time
does not distort tokens/s or the ETA.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from pejax.encodings import arg_checks


def format_duration(seconds: float | None) -> str:
  """Rounds to seconds: ``3725.0 -> "1h02m05s"``, ``95.0 -> "1m35s"``, ``7.2 -> "7s"``.

  ``None`` or a non-finite value (unknown ETA) gives ``"?"``.

  Args:
    seconds: A duration in seconds (negative values count as 0), or None when unknown.

  Returns:
    The duration as ``"<h>h<mm>m<ss>s"``, ``"<m>m<ss>s"`` or ``"<s>s"``, or ``"?"``.
  """
  if seconds is None or not math.isfinite(seconds):
    return "?"
  seconds = max(0, int(round(seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m{secs:02d}s"
  if minutes:
    return f"{minutes}m{secs:02d}s"
  return f"{secs}s"


def _format_rate(value: float | None) -> str:
  if value is None:
    return "?"
  if value >= 1e6:
    return f"{value / 1e6:.2f}M"
  if value >= 1e3:
    return f"{value / 1e3:.1f}k"
  return f"{value:.1f}"


class ProgressMeter:
  """Accumulates per-step losses and token counts, and logs a line every ``log_every`` steps.

  Args:
    total_steps: Final step of the run.
    log_every: Steps between lines (0 disables the periodic lines; the final step always logs).
    start_step: Step the run starts from (after a resume).
    log_fn: Called with each line.
    clock: Monotonic clock in seconds (injectable for tests).
  """

  def __init__(
      self,
      *,
      total_steps: int,
      log_every: int,
      start_step: int = 0,
      log_fn: Callable[[str], Any] = print,
      clock: Callable[[], float] = time.perf_counter,
  ):
    self.total_steps = arg_checks.check_positive_int("total_steps", total_steps)
    self.log_every = arg_checks.check_nonnegative_int("log_every", log_every)
    self.start_step = arg_checks.check_nonnegative_int("start_step", start_step)
    self.log_fn = log_fn
    self.clock = clock
    self._losses: list[float] = []
    self._window_time: float | None = None
    self._window_step = start_step
    self._window_tokens = 0.0

  def should_log(self, step: int) -> bool:
    """Whether ``step`` ends a window: a multiple of ``log_every`` or the final step.

    Args:
      step: A finished step (1-based count of applied updates).

    Returns:
      True if :meth:`update` logs a line at ``step``.
    """
    return step >= self.total_steps or (self.log_every > 0 and step % self.log_every == 0)

  def update(
      self,
      step: int,
      *,
      loss: float,
      tokens: float,
      extra: dict[str, float] | None = None,
  ) -> dict[str, float | None] | None:
    """Records one finished step; at the end of a window logs a line and returns its summary.

    Args:
      step: The step just finished (1-based count of applied updates).
      loss: Its training loss.
      tokens: Tokens it processed (counted in tokens/s).
      extra: Values shown as-is at the end of the line (e.g. ``learning_rate``, ``grad_norm``).

    Returns:
      ``None`` inside a window; at its end ``{"loss": mean loss over the window,
      "tokens_per_s", "steps_per_s", "eta_s"}`` (rates ``None`` when the window holds no timed
      step, i.e. only the first step of the run).
    """
    now = self.clock()
    self._losses.append(float(loss))
    if self._window_time is None:
      # The first step includes compilation: start the clock when it is done.
      self._window_time = now
      self._window_step = step
    else:
      self._window_tokens += float(tokens)
    if not self.should_log(step):
      return None
    elapsed = now - self._window_time
    timed_steps = step - self._window_step
    steps_per_s = timed_steps / elapsed if timed_steps > 0 and elapsed > 0 else None
    tokens_per_s = self._window_tokens / elapsed if timed_steps > 0 and elapsed > 0 else None
    eta_s = (self.total_steps - step) / steps_per_s if steps_per_s else None
    summary = {
        "loss": sum(self._losses) / len(self._losses),
        "tokens_per_s": tokens_per_s,
        "steps_per_s": steps_per_s,
        "eta_s": eta_s,
    }
    self.log_fn(self.format_line(step, summary, extra))
    self._losses = []
    self._window_time = now
    self._window_step = step
    self._window_tokens = 0.0
    return summary

  def format_line(
      self, step: int, summary: dict[str, float | None], extra: dict[str, float] | None = None
  ) -> str:
    """``step 150/600 (25%) | loss 2.3456 | 12.3k tok/s | 4.56 steps/s | ETA 1m38s | ...``.

    Args:
      step: The step that ends the window.
      summary: The window summary :meth:`update` returns (``loss``, ``tokens_per_s``,
        ``steps_per_s``, ``eta_s``; unknown rates shown as ``?``).
      extra: Values appended as ``name value`` (3 significant digits).

    Returns:
      The log line, fields joined by ``" | "``.
    """
    width = len(str(self.total_steps))
    steps_per_s = summary["steps_per_s"]
    parts = [
        f"step {step:>{width}d}/{self.total_steps} ({100.0 * step / self.total_steps:.0f}%)",
        f"loss {summary['loss']:.4f}",
        f"{_format_rate(summary['tokens_per_s'])} tok/s",
        f"{steps_per_s:.2f} steps/s" if steps_per_s is not None else "? steps/s",
        f"ETA {format_duration(summary['eta_s'])}",
    ]
    for name, value in (extra or {}).items():
      parts.append(f"{name} {value:.3g}")
    return " | ".join(parts)

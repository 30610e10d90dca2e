"""Where attention runs and which schedule a call gets: the platform and ``dense`` / ``blockwise``.

The platform is ``jax.default_backend()`` (``"gpu"`` split into CUDA and ROCm, since cuDNN needs
CUDA) unless :func:`target_platform` names another, to lower for that platform with
``jax.export`` from a CPU process. The schedule fixes the form of the PE bias a call receives: an
evaluated ``[B|1, H, Lq, Lk]`` array for ``dense``, a function of positions for ``blockwise``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import jax

from pejax.encodings import arg_checks

IMPLEMENTATIONS = ("dense", "blockwise")
ATTENTION_CHOICES = ("auto",) + IMPLEMENTATIONS

# Where the Pallas kernel serves calls (and the decoder hands it a PE's kernel bias).
ACCELERATORS = frozenset({"cuda", "rocm", "tpu"})

# Longest query length that "auto" runs densely, per platform. CPU: measured by
# benchmarks/attention_crossover.py (results/attention_crossover.md; also
# results/attention_vs_torch*.md, 2026-11-30): at 1024 tokens dense is the faster schedule
# (forward + backward 69 vs 82 ms, tile 512), at 2048 blockwise is (forward 62 vs 101 ms), and the
# gap widens with length. Other platforms: not measured; the former default (2048) stands.
DENSE_UP_TO = {"cpu": 1024}
DENSE_UP_TO_UNMEASURED = 2048

_TARGET_PLATFORMS: list[str] = []  # The stack of target_platform() overrides.


@contextlib.contextmanager
def target_platform(name: str) -> Iterator[None]:
  """Traces attention for platform ``name`` (e.g. to ``jax.export`` for ``"tpu"`` from a CPU).

  Inside the context :func:`platform` returns ``name``, so the kernel table picks what that
  platform would run (the Pallas kernel on ``"cuda"`` / ``"tpu"``). Functions jitted earlier keep
  their traces: trace (or export) afresh inside the context.

  Args:
    name: ``"cpu"``, ``"cuda"``, ``"rocm"`` or ``"tpu"``.

  Yields:
    Nothing.
  """
  arg_checks.check_choice("name", name, ("cpu", "cuda", "rocm", "tpu"))
  _TARGET_PLATFORMS.append(name)
  try:
    yield
  finally:
    _TARGET_PLATFORMS.pop()


def platform() -> str:
  """The platform attention dispatches for: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, ...

  ``jax.default_backend()``, with ``"gpu"`` split into CUDA and ROCm (cuDNN needs CUDA), unless
  :func:`target_platform` says otherwise.

  Returns:
    the platform name.
  """
  if _TARGET_PLATFORMS:
    return _TARGET_PLATFORMS[-1]
  backend = jax.default_backend()
  if backend != "gpu":
    return backend
  try:
    from jax.extend import backend as jax_backend  # pylint: disable=g-import-not-at-top
    version = jax_backend.get_backend().platform_version.lower()
  except Exception:  # pylint: disable=broad-except
    return "gpu"
  return "rocm" if "rocm" in version else "cuda"


def choose_implementation(attention: str, length: int, *,
                          blockwise_threshold: Optional[int] = None,
                          supports_blockwise: bool = True,
                          platform_name: Optional[str] = None) -> str:
  """The schedule of a call: ``"dense"`` or ``"blockwise"`` (``"auto"`` resolved by length).

  The one place that chooses (the decoder, the evaluation loops and
  :func:`pejax.nn.attention.attention` ask it). An explicit choice is returned as is.

  Args:
    attention: ``"auto"``, ``"dense"`` or ``"blockwise"``.
    length: the (static) number of query tokens.
    blockwise_threshold: longest length that ``"auto"`` runs densely; ``None`` (or 0): the
      platform's measured crossover (``DENSE_UP_TO``: 1024 on CPU).
    supports_blockwise: whether every PE involved can run blockwise (CoPE cannot): if not,
      ``"auto"`` stays dense at any length.
    platform_name: the platform (default: :func:`platform`).

  Returns:
    ``"dense"`` or ``"blockwise"``.

  Raises:
    ValueError: naming ``attention`` or ``blockwise_threshold`` for a bad value.
  """
  arg_checks.check_choice("attention", attention, ATTENTION_CHOICES)
  if attention != "auto":
    return attention
  if blockwise_threshold is None or (isinstance(blockwise_threshold, int)
                                     and not isinstance(blockwise_threshold, bool)
                                     and blockwise_threshold == 0):
    blockwise_threshold = DENSE_UP_TO.get(platform_name or platform(), DENSE_UP_TO_UNMEASURED)
  blockwise_threshold = arg_checks.check_positive_int("blockwise_threshold", blockwise_threshold)
  if not supports_blockwise:
    return "dense"
  return "blockwise" if length > blockwise_threshold else "dense"

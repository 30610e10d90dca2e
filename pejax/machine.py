"""The machine a result was produced on, as one line for reports and result records.

Every record pejax writes (``results.json`` / ``results.md`` of a run, a study's report, a
benchmark table) names where its numbers come from with :func:`describe_machine`::

  Linux x86_64, AMD EPYC (family 26, model 2), 2 cores, jax 0.10.2 on cpu
"""

from __future__ import annotations

import os
import pathlib
import platform


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
  """The CPU's model name, with its family and model numbers when the name alone is generic.

  Args:
    cpuinfo: the Linux CPU description file (absent elsewhere: ``platform.processor()``).

  Returns:
    e.g. ``"AMD EPYC (family 26, model 2)"``, or ``"unknown CPU"``.
  """
  try:
    fields = {}
    for line in pathlib.Path(cpuinfo).read_text().splitlines():
      key, _, value = line.partition(":")
      fields.setdefault(key.strip(), value.strip())
  except OSError:
    return platform.processor() or "unknown CPU"
  name = fields.get("model name") or platform.processor() or "unknown CPU"
  if "cpu family" in fields:
    name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
  return name


def describe_machine() -> str:
  """OS, architecture, CPU model, core count and the JAX version and backend, on one line.

  Returns:
    e.g. ``"Linux x86_64, AMD EPYC (family 26, model 2), 2 cores, jax 0.10.2 on cpu"``.
  """
  import jax  # pylint: disable=g-import-not-at-top
  return (f"{platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}")

"""Multi-process start: ``jax.distributed.initialize`` from explicit settings or the cluster's.

One process per host, or per GPU (what SLURM / Open MPI auto-detection assumes). Call
:func:`initialize_distributed` before anything touches a device; afterwards ``jax.devices()``
lists the devices of every process and a mesh spans them all.

* Explicit: ``coordinator_address="10.0.0.1:1234", num_processes=2, process_id=0|1`` (the
  coordinator is process 0's host; any free port).
* Environment: ``JAX_COORDINATOR_ADDRESS`` (and ``JAX_LOCAL_DEVICE_IDS``) are read by JAX;
  SLURM, Open MPI, Kubernetes (JobSet) and Cloud TPU pods are detected automatically when
  ``enabled=True`` and the rest is left unset.
"""

from __future__ import annotations

import os

import jax


def initialize_distributed(*, enabled: bool = False, coordinator_address: str = "",
                           num_processes: int = 0, process_id: int = -1,
                           heartbeat_timeout_s: int = 100, log=print) -> bool:
  """Starts JAX's distributed runtime when asked to; a no-op for single-process runs.

  Initializes when ``enabled`` is true, when ``coordinator_address`` or ``num_processes > 1``
  is given, or when the environment sets ``JAX_COORDINATOR_ADDRESS``. Unset values (``""``,
  ``0``, ``-1``) are left to JAX's cluster auto-detection.

  Args:
    enabled: initialize even with nothing set (cluster auto-detection: TPU pod, SLURM, ...).
    coordinator_address: ``host:port`` of process 0.
    num_processes: number of processes; 0 = detect.
    process_id: this process's index in ``[0, num_processes)``; -1 = detect.
    heartbeat_timeout_s: seconds without a heartbeat after which the coordination service
      declares a process lost and every other process stops with an error (instead of waiting
      forever in a collective).
    log: receives one line describing the topology.

  Returns:
    ``True`` if the distributed runtime was initialized by this call or earlier.

  Raises:
    ValueError: on an out-of-range ``process_id`` / ``num_processes`` /
      ``heartbeat_timeout_s``.
  """
  if isinstance(heartbeat_timeout_s, bool) or int(heartbeat_timeout_s) != heartbeat_timeout_s or (
      heartbeat_timeout_s < 1):
    raise ValueError(f"heartbeat_timeout_s must be an integer >= 1, got {heartbeat_timeout_s!r}")
  if num_processes < 0:
    raise ValueError(f"num_processes must be >= 0 (0 = detect), got {num_processes}")
  if process_id < -1 or (num_processes and process_id >= num_processes):
    raise ValueError(
        f"process_id must be in [0, num_processes={num_processes}) or -1 (detect), got "
        f"{process_id}")
  wanted = (enabled or bool(coordinator_address) or num_processes > 1
            or bool(os.environ.get("JAX_COORDINATOR_ADDRESS")))
  if not wanted:
    return False
  if jax.distributed.is_initialized():
    return True
  jax.distributed.initialize(
      coordinator_address=coordinator_address or None,
      num_processes=num_processes or None,
      process_id=None if process_id < 0 else process_id,
      heartbeat_timeout_seconds=int(heartbeat_timeout_s))
  log(f"jax.distributed: process {jax.process_index()} of {jax.process_count()}, "
      f"{jax.local_device_count()} local / {jax.device_count()} global devices")
  return True


def is_coordinator() -> bool:
  """Whether this is process 0 (the one that writes reports and plots).

  Returns:
    True on process 0 (always in a single-process run).
  """
  return jax.process_index() == 0


def process_summary() -> str:
  """``"process p/N, l local of g devices (platform)"`` for logs.

  Returns:
    E.g. ``"process 0/2, 4 local of 8 devices (gpu)"``.
  """
  return (f"process {jax.process_index()}/{jax.process_count()}, {jax.local_device_count()} "
          f"local of {jax.device_count()} devices ({jax.devices()[0].platform})")


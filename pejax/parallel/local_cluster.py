r"""Several JAX processes on one machine, as on a cluster: the multi-host path on a laptop.

JAX's multi-controller runtime runs one process per host; its CPU backend runs several processes
on one machine with real cross-process collectives, so the cluster path (``jax.distributed``,
per-process data, Orbax multi-process checkpoints, synchronized preemption, failure detection)
can be exercised without a cluster. :class:`LocalCluster` starts ``N`` copies of a command on
``127.0.0.1``: a free port for the coordinator (process 0), each process with its own
``devices_per_process`` fake CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count``),
each told its id; it streams and keeps every process's output, and kills whatever still runs
when its time is up, so a hung collective can never hang the caller.

From the command line (the command after ``--``; the distributed flags are appended)::

  python -m pejax.parallel.local_cluster --num_processes=2 --devices_per_process=4 -- \
    python launch.py --mesh=data=4,model=2 --steps=50

runs ``launch.py ... --coordinator_address=127.0.0.1:<port> --num_processes=2
--process_id=<i>`` twice, prefixes each output line with ``[p<i>]`` and exits with the first
non-zero exit status (0 when every process succeeded). From Python::

  with LocalCluster(["python", "launch.py", "--mesh=data=4,model=2"], num_processes=2) as c:
    results = c.wait(timeout_s=300)
  assert all(r.returncode == 0 for r in results)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Mapping, Optional, Sequence

# Flags appended to the command of process i (launch.py's names).
DISTRIBUTED_FLAGS = ("--coordinator_address={coordinator_address}",
                     "--num_processes={num_processes}", "--process_id={process_id}")


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port nobody listens on now (the OS picks it; another program may take it later).

  Args:
    host: the interface to bind.

  Returns:
    The port number.
  """
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((host, 0))
    return int(s.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class ProcessResult:
  """How one process of a :class:`LocalCluster` ended.

  Attributes:
    process_id: its index in ``[0, num_processes)``.
    returncode: its exit status (negative: killed by that signal, as ``subprocess`` reports).
    output: everything it wrote to stdout and stderr, interleaved as written.
    seconds: wall time from the start of the cluster to its exit.
    killed: whether the cluster killed it because the time was up.
  """

  process_id: int
  returncode: int
  output: str
  seconds: float
  killed: bool = False


class LocalClusterTimeout(TimeoutError):
  """Processes of a :class:`LocalCluster` were still running when the time was up (now killed).

  Attributes:
    results: the :class:`ProcessResult` of every process (the killed ones have ``killed=True``).
  """

  def __init__(self, message: str, results: Sequence[ProcessResult]):
    super().__init__(message)
    self.results = list(results)


def _substitute(item: str, values: Mapping[str, object]) -> str:
  for key, value in values.items():
    item = item.replace("{" + key + "}", str(value))
  return item


class LocalCluster:
  """``num_processes`` copies of ``command`` forming one JAX distributed job on ``127.0.0.1``.

  Each process gets the command with ``{process_id}``, ``{num_processes}``,
  ``{coordinator_address}`` and ``{port}`` substituted in every argument, plus
  :data:`DISTRIBUTED_FLAGS` appended when ``append_flags`` is true, and an environment with
  ``JAX_PLATFORMS=cpu`` and ``devices_per_process`` fake CPU devices in ``XLA_FLAGS`` (replacing
  any device count given there). Output is read by one thread per process (no pipe can fill up
  and block a child) and kept; ``echo`` receives each line prefixed with ``[p<i>] `` as it comes.

  Args:
    command: the program and its arguments, e.g. ``[sys.executable, "launch.py", ...]``.
    num_processes: N >= 1.
    devices_per_process: fake CPU devices of each process (>= 1).
    cwd: working directory of the processes (default: this one's).
    env: environment of the processes (default: this one's), before the settings above.
    append_flags: append ``--coordinator_address``, ``--num_processes``, ``--process_id``.
    echo: called with each prefixed output line (e.g. ``print``); ``None`` keeps quiet.
    port: coordinator port; default :func:`free_port`.

  Attributes:
    processes: the ``subprocess.Popen`` of each process (after :meth:`start`).
    coordinator_address: ``127.0.0.1:<port>`` (after :meth:`start`).
    started_at: ``time.monotonic()`` when :meth:`start` ran; :attr:`ProcessResult.seconds`
      counts from it.

  Raises:
    ValueError: on ``num_processes`` or ``devices_per_process`` below 1.
  """

  def __init__(self, command: Sequence[str], *, num_processes: int = 2,
               devices_per_process: int = 4, cwd: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None, append_flags: bool = True,
               echo: Optional[Callable[[str], object]] = None, port: Optional[int] = None):
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
      raise ValueError(f"num_processes must be an integer >= 1, got {num_processes!r}")
    if (isinstance(devices_per_process, bool) or not isinstance(devices_per_process, int)
        or devices_per_process < 1):
      raise ValueError(
          f"devices_per_process must be an integer >= 1, got {devices_per_process!r}")
    self.command = list(command)
    self.num_processes = num_processes
    self.devices_per_process = devices_per_process
    self.cwd = cwd
    self.base_env = dict(os.environ if env is None else env)
    self.append_flags = append_flags
    self.echo = echo
    self.port = port
    self.coordinator_address = ""
    self.processes: list[subprocess.Popen] = []
    self._lines: list[list[str]] = []
    self._readers: list[threading.Thread] = []
    self._ended: list[Optional[float]] = []
    self._killed: list[bool] = []
    self.started_at = 0.0

  def argv(self, process_id: int) -> list[str]:
    """The command line of process ``process_id`` (after :meth:`start` chose the port).

    Args:
      process_id: index in ``[0, num_processes)``.

    Returns:
      The argument list passed to ``subprocess.Popen``.
    """
    values = {"process_id": process_id, "num_processes": self.num_processes,
              "coordinator_address": self.coordinator_address, "port": self.port}
    extra = list(DISTRIBUTED_FLAGS) if self.append_flags else []
    return [_substitute(item, values) for item in self.command + extra]

  def env(self, process_id: int) -> dict[str, str]:
    """The environment of process ``process_id``.

    Args:
      process_id: index in ``[0, num_processes)``.

    Returns:
      The base environment with ``JAX_PLATFORMS=cpu``, the fake device count in ``XLA_FLAGS``
      and ``PEJAX_LOCAL_CLUSTER_PROCESS_ID`` (for scripts that read their id from there).
    """
    env = dict(self.base_env)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={self.devices_per_process}")
    env.update(XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
               PEJAX_LOCAL_CLUSTER_PROCESS_ID=str(process_id),
               PEJAX_LOCAL_CLUSTER_COORDINATOR=self.coordinator_address)
    return env

  def start(self) -> LocalCluster:
    """Starts every process (process 0 first: it hosts the coordinator).

    Returns:
      ``self``.

    Raises:
      RuntimeError: if already started.
    """
    if self.processes:
      raise RuntimeError("this LocalCluster was already started")
    if self.port is None:
      self.port = free_port()
    self.coordinator_address = f"127.0.0.1:{self.port}"
    self.started_at = time.monotonic()
    for i in range(self.num_processes):
      proc = subprocess.Popen(self.argv(i), cwd=self.cwd, env=self.env(i),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", start_new_session=True)
      self.processes.append(proc)
      self._lines.append([])
      self._ended.append(None)
      self._killed.append(False)
      reader = threading.Thread(target=self._read, args=(i,), daemon=True)
      reader.start()
      self._readers.append(reader)
    return self

  def _read(self, i: int) -> None:
    stream = self.processes[i].stdout
    for line in stream:
      self._lines[i].append(line)
      if self.echo is not None:
        self.echo(f"[p{i}] {line.rstrip()}")
    stream.close()

  def output(self, process_id: int) -> str:
    """What process ``process_id`` has written so far (stdout and stderr).

    Args:
      process_id: index in ``[0, num_processes)``.

    Returns:
      The text, possibly ending in an incomplete line while it runs.
    """
    return "".join(self._lines[process_id])

  def wait_for_output(self, process_id: int, text: str, *, timeout_s: float) -> bool:
    """Waits until process ``process_id`` has printed ``text`` (or has exited, or time is up).

    Args:
      process_id: index in ``[0, num_processes)``.
      text: a substring to wait for.
      timeout_s: the most seconds to wait.

    Returns:
      Whether ``text`` appeared.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
      if text in self.output(process_id):
        return True
      if self.processes[process_id].poll() is not None:
        self._readers[process_id].join(timeout=5)
        return text in self.output(process_id)
      time.sleep(0.02)
    return False

  def send_signal(self, process_id: int, signum: int = signal.SIGTERM) -> None:
    """Sends ``signum`` to process ``process_id`` (what a scheduler's preemption notice does).

    Args:
      process_id: index in ``[0, num_processes)``.
      signum: the signal, e.g. ``signal.SIGTERM`` or ``signal.SIGKILL``.
    """
    proc = self.processes[process_id]
    if proc.poll() is None:
      proc.send_signal(signum)

  def kill(self, process_id: int) -> None:
    """Kills process ``process_id`` at once (``SIGKILL``: a crashed host).

    Args:
      process_id: index in ``[0, num_processes)``.
    """
    self.send_signal(process_id, signal.SIGKILL)

  def wait(self, timeout_s: float = 600.0, *, raise_on_timeout: bool = True,
           ) -> list[ProcessResult]:
    """Waits for every process; kills the ones still running after ``timeout_s`` seconds.

    Args:
      timeout_s: the most seconds to wait, counted from this call.
      raise_on_timeout: raise :class:`LocalClusterTimeout` when something had to be killed.

    Returns:
      One :class:`ProcessResult` per process, in process order.

    Raises:
      LocalClusterTimeout: a process was still running at the deadline (it has been killed; the
        exception carries every result).
    """
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in self.processes) and time.monotonic() < deadline:
      self._note_exits()
      time.sleep(0.02)
    self._note_exits()
    for i, proc in enumerate(self.processes):
      if proc.poll() is None:
        self._killed[i] = True
        _kill_group(proc)
    for i, proc in enumerate(self.processes):
      proc.wait()
      self._readers[i].join(timeout=10)
    self._note_exits()
    results = [ProcessResult(i, proc.returncode, self.output(i), self._ended[i] or 0.0,
                             self._killed[i]) for i, proc in enumerate(self.processes)]
    if raise_on_timeout and any(self._killed):
      stuck = [i for i, k in enumerate(self._killed) if k]
      tails = "\n".join(f"--- process {r.process_id} (exit {r.returncode}) ---\n"
                        f"{r.output[-3000:]}" for r in results)
      raise LocalClusterTimeout(
          f"processes {stuck} still ran after {timeout_s:.0f}s and were killed\n{tails}",
          results)
    return results

  def _note_exits(self) -> None:
    now = time.monotonic() - self.started_at
    for i, proc in enumerate(self.processes):
      if self._ended[i] is None and proc.poll() is not None:
        self._ended[i] = now

  def close(self) -> None:
    """Kills every process still running (idempotent)."""
    for proc in self.processes:
      if proc.poll() is None:
        _kill_group(proc)
        proc.wait()

  def __enter__(self) -> LocalCluster:
    return self.start() if not self.processes else self

  def __exit__(self, *exc_info) -> None:
    self.close()


def _kill_group(proc: subprocess.Popen) -> None:
  """SIGKILL to the process and its children (it leads its own session)."""
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    try:
      proc.kill()
    except ProcessLookupError:
      pass


def run_local_cluster(command: Sequence[str], *, num_processes: int = 2,
                      devices_per_process: int = 4, timeout_s: float = 600.0,
                      **kwargs) -> list[ProcessResult]:
  """Runs ``command`` as an N-process JAX job on this machine and waits for it.

  Args:
    command: the program and its arguments (see :class:`LocalCluster`).
    num_processes: N >= 1.
    devices_per_process: fake CPU devices of each process.
    timeout_s: processes still running after this many seconds are killed.
    **kwargs: passed to :class:`LocalCluster` (``cwd``, ``env``, ``append_flags``, ``echo``).

  Returns:
    One :class:`ProcessResult` per process, in process order.

  Raises:
    LocalClusterTimeout: something still ran at the deadline (killed; results attached).
  """
  with LocalCluster(command, num_processes=num_processes,
                    devices_per_process=devices_per_process, **kwargs) as cluster:
    return cluster.wait(timeout_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """``python -m pejax.parallel.local_cluster [options] -- COMMAND...``; returns the exit status.

  Args:
    argv: the arguments after the program name (default ``sys.argv[1:]``).

  Returns:
    0 when every process exited with 0, else the first non-zero exit status in process order
    (124 when the time ran out).
  """
  parser = argparse.ArgumentParser(
      prog="python -m pejax.parallel.local_cluster",
      description="Run COMMAND as an N-process JAX job on this machine (coordinator on "
      "127.0.0.1, fake CPU devices per process); --coordinator_address, --num_processes and "
      "--process_id are appended to COMMAND unless --no_append_flags.")
  parser.add_argument("--num_processes", type=int, default=2, help="processes (default 2)")
  parser.add_argument("--devices_per_process", type=int, default=4,
                      help="fake CPU devices of each process (default 4)")
  parser.add_argument("--timeout_s", type=float, default=3600.0,
                      help="kill everything still running after this many seconds")
  parser.add_argument("--no_append_flags", action="store_true",
                      help="do not append the distributed flags (use {process_id}, "
                      "{num_processes}, {coordinator_address} in COMMAND instead)")
  parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("no command given (put it after --)")
  if command[0] == "python":
    command[0] = sys.executable
  cluster = LocalCluster(command, num_processes=args.num_processes,
                         devices_per_process=args.devices_per_process,
                         append_flags=not args.no_append_flags,
                         echo=lambda line: print(line, flush=True))
  forwarded = {}

  def forward(signum, frame):  # Ctrl-C / a scheduler's SIGTERM reaches every process.
    del frame
    for i in range(cluster.num_processes):
      cluster.send_signal(i, signum)

  for signum in (signal.SIGINT, signal.SIGTERM):
    forwarded[signum] = signal.signal(signum, forward)
  try:
    with cluster:
      try:
        results = cluster.wait(args.timeout_s)
      except LocalClusterTimeout as e:
        print(f"local_cluster: {str(e).splitlines()[0]}", file=sys.stderr)
        return 124
  finally:
    for signum, previous in forwarded.items():
      signal.signal(signum, previous)
  codes = [r.returncode for r in results]
  print(f"local_cluster: exit statuses {codes}", file=sys.stderr)
  failed = [c for c in codes if c != 0]
  return (failed[0] if failed[0] > 0 else 128 - failed[0]) if failed else 0


if __name__ == "__main__":
  sys.exit(main())

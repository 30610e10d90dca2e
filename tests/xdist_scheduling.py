"""A pytest-xdist scheduler for ``--dist loadscope`` that survives a crashed worker.

pytest-xdist 3.8.0's LoadScopeScheduling (``--dist loadscope``, setup.cfg) puts a crashed
worker's whole workload back on the queue, the finished scopes and the test that crashed
included: the crash repeats on every replacement worker, and the finished scopes become empty
work units that are never marked complete, so the run waits forever (pytest-dev/pytest-xdist
issues 1323, 1327, 1378; CI hit it on 2026-12-01 after a segmentation fault). A replacement
worker given a single test also waits forever for a second one. This scheduler requeues only
the unfinished tests of the crashed worker (the crashed test once more, see below; after its
second crash xdist reports it failed, with the worker's output, and it is left out), and tops a
worker up to more than two pending tests or shuts it down when nothing is left, so every worker
can finish its queue. A
replacement worker is given work only once its own collection has arrived: xdist 3.8.0 raised
KeyError in ``registered_collections`` when another worker's collection finished first (issue
1189; a fresh-clone CI run here hit it on 2026-12-02). A worker that has just died (its last
test completion is handled before its crash) cannot be sent more work or a shutdown: the send
raises OSError ("cannot send (already closed?)"), which xdist 3.8.0 turns into an
INTERNALERROR that ends the session (seen in this repository's own crash test on 2026-12-02).
Here the work stays assigned to the dead worker, and its crash, which xdist reports next,
requeues it.

A test that crashes its worker is run once more, first in line, on a replacement worker
started with ``PEJAX_TEST_RERUN_AFTER_CRASH`` set (tests/conftest.py then turns the persistent
compilation cache off in that worker: the crashes of 2026-12-02 and 2026-12-04 were in JAX's
cache write, ``put_executable_and_time``, that of 2026-12-06 in loading a cached executable).
Only a second crash of the same test fails it. Every rerun is listed at the end of the run
(``pytest_terminal_summary``), with the worker's own output (its faulthandler stack) printed by
xdist where it happened, so a recovered crash is seen, not hidden.

Loaded by tests/conftest.py (the ``pytest_xdist_make_scheduler`` and ``pytest_terminal_summary``
hooks); no jax import, so a subprocess test can load it alone (tests/test_suite_setup.py).
"""

from __future__ import annotations

import os

# Set in the controller's environment, which the replacement workers it starts inherit.
RERUN_ENV = "PEJAX_TEST_RERUN_AFTER_CRASH"
# Tests that crashed a worker once and were run again (controller process, this module).
RERUNS: list[str] = []


def _crash_safe_load_scope_scheduling():
  from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

  class CrashSafeLoadScopeScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose crash recovery requeues only unfinished tests."""

    def __init__(self, config, log=None):
      super().__init__(config, log)
      self.crashed_once: set[str] = set()  # Tests that have crashed a worker.
      # Scopes holding a test to rerun, kept for the next worker started after the crash.
      self.reruns: dict[str, dict[str, bool]] = {}
      self.replacements: set = set()  # Workers started after a crash.

    @property
    def tests_finished(self) -> bool:
      return not self.reruns and super().tests_finished

    @property
    def has_pending(self) -> bool:
      return bool(self.reruns) or super().has_pending

    def add_node(self, node):
      super().add_node(node)
      if self.crashed_once:
        self.replacements.add(node)

    def remove_node(self, node):
      workload = self.assigned_work.pop(node)
      self.replacements.discard(node)
      crashitem = next((nodeid for unit in workload.values()
                        for nodeid, done in unit.items() if not done), None)
      if crashitem is None:
        return None
      rerun = crashitem not in self.crashed_once
      self.crashed_once.add(crashitem)
      for scope, unit in workload.items():
        if crashitem in unit and not rerun:
          unit[crashitem] = True  # Reported failed by xdist; never run again.
        if all(unit.values()):
          continue
        if crashitem in unit and rerun:
          self.reruns[scope] = unit  # For the replacement worker, first thing.
        else:
          self.workqueue[scope] = unit
      if rerun:
        os.environ[RERUN_ENV] = crashitem  # Inherited by the replacement worker.
        RERUNS.append(crashitem)
      for other in self.assigned_work:
        self._reschedule(other)
      return None if rerun else crashitem  # xdist reports a returned test as failed.

    def _reschedule(self, node):
      if node.shutting_down:
        return
      if node not in self.registered_collections:
        return  # A replacement still collecting: scheduled when its collection arrives.
      if node in self.replacements:
        while self.reruns:
          scope, unit = next(iter(self.reruns.items()))
          del self.reruns[scope]
          if not self._send_unit(node, scope, unit):
            return  # The worker is dead; its crash report requeues what it holds.
      # A worker runs a test once it holds the next one (or a shutdown): keep it above two.
      while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
        if not self._assign_work_unit(node):
          return  # The worker is dead; its crash report requeues what it holds.
      if not self.workqueue and not self.reruns:
        _send_or_note_dead(node.shutdown)

    def _assign_work_unit(self, node):
      """Assigns the next unfinished scope to ``node``; ``False`` if ``node`` is dead."""
      while self.workqueue:
        scope, unit = self.workqueue.popitem(last=False)
        if all(unit.values()):
          continue  # Nothing left to run in it.
        return self._send_unit(node, scope, unit)
      return True

    def _send_unit(self, node, scope, unit):
      """Sends the unfinished tests of ``unit``; ``False`` if ``node`` is dead."""
      self.assigned_work.setdefault(node, {})[scope] = unit
      collection = self.registered_collections[node]
      indices = [collection.index(nodeid) for nodeid, done in unit.items() if not done]
      return _send_or_note_dead(lambda: node.send_runtest_some(indices))

  return CrashSafeLoadScopeScheduling


def _send_or_note_dead(send) -> bool:
  """Runs ``send``; ``False`` when the worker's channel is already closed (it has died)."""
  try:
    send()
  except OSError:
    return False
  return True


def pytest_xdist_make_scheduler(config, log):
  if config.getvalue("dist") != "loadscope":
    return None  # xdist's own scheduler for the other modes.
  return _crash_safe_load_scope_scheduling()(config, log)


def pytest_terminal_summary(terminalreporter):
  """Lists the tests that crashed a worker once and were run again (their outcome is above)."""
  if not RERUNS:
    return
  terminalreporter.write_sep("=", f"{len(RERUNS)} test(s) crashed their worker and were rerun",
                             yellow=True, bold=True)
  for nodeid in RERUNS:
    terminalreporter.write_line(
        f"{nodeid}: crashed its worker once (its output and stack are printed above, at "
        f"'node down'); run again in a replacement worker with the persistent compilation "
        f"cache off; the outcome reported is the rerun's")

"""A pytest-xdist scheduler for ``--dist loadscope`` that survives a crashed worker.

pytest-xdist 3.8.0's LoadScopeScheduling (``--dist loadscope``, setup.cfg) puts a crashed
worker's whole workload back on the queue, the finished scopes and the test that crashed
included: the crash repeats on every replacement worker, and the finished scopes become empty
work units that are never marked complete, so the run waits forever (pytest-dev/pytest-xdist
issues 1323, 1327, 1378; CI hit it on 2026-12-01 after a segmentation fault). A replacement
worker given a single test also waits forever for a second one. This scheduler requeues only
the unfinished tests of the crashed worker, the crashed test left out (xdist has already
reported it failed, with the worker's output), and tops a worker up to more than two pending
tests or shuts it down when nothing is left, so every worker can finish its queue. A
replacement worker is given work only once its own collection has arrived: xdist 3.8.0 raised
KeyError in ``registered_collections`` when another worker's collection finished first (issue
1189; a fresh-clone CI run here hit it on 2026-12-02). A worker that has just died (its last
test completion is handled before its crash) cannot be sent more work or a shutdown: the send
raises OSError ("cannot send (already closed?)"), which xdist 3.8.0 turns into an
INTERNALERROR that ends the session (seen in this repository's own crash test on 2026-12-02).
Here the work stays assigned to the dead worker, and its crash, which xdist reports next,
requeues it.

Loaded by tests/conftest.py (the ``pytest_xdist_make_scheduler`` hook); no jax import, so a
subprocess test can load it alone (tests/test_suite_setup.py).
"""

from __future__ import annotations


def _crash_safe_load_scope_scheduling():
  from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

  class CrashSafeLoadScopeScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose crash recovery requeues only unfinished tests."""

    def remove_node(self, node):
      workload = self.assigned_work.pop(node)
      crashitem = next((nodeid for unit in workload.values()
                        for nodeid, done in unit.items() if not done), None)
      if crashitem is None:
        return None
      for scope, unit in workload.items():
        if crashitem in unit:
          unit[crashitem] = True  # Reported failed by xdist; never run again.
        if not all(unit.values()):
          self.workqueue[scope] = unit
      for other in self.assigned_work:
        self._reschedule(other)
      return crashitem

    def _reschedule(self, node):
      if node.shutting_down:
        return
      if node not in self.registered_collections:
        return  # A replacement still collecting: scheduled when its collection arrives.
      # A worker runs a test once it holds the next one (or a shutdown): keep it above two.
      while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
        if not self._assign_work_unit(node):
          return  # The worker is dead; its crash report requeues what it holds.
      if not self.workqueue:
        _send_or_note_dead(node.shutdown)

    def _assign_work_unit(self, node):
      """Assigns the next unfinished scope to ``node``; ``False`` if ``node`` is dead."""
      while self.workqueue:
        scope, unit = self.workqueue.popitem(last=False)
        if all(unit.values()):
          continue  # Nothing left to run in it.
        self.assigned_work.setdefault(node, {})[scope] = unit
        collection = self.registered_collections[node]
        indices = [collection.index(nodeid) for nodeid, done in unit.items() if not done]
        return _send_or_note_dead(lambda: node.send_runtest_some(indices))
      return True

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

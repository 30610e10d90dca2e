"""One process of tests/parallel/test_process_agreement.py's 2-process job.

Started by ``pejax.parallel.local_cluster`` (``{process_id}`` and the coordinator come on the
command line); calls :func:`pejax.parallel.agree_on_stop` once per round with this process's
request of that round and prints the answers as one JSON line.

Usage: ``python agreement_worker.py COORDINATOR NUM_PROCESSES PROCESS_ID``.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

# pylint: disable=g-import-not-at-top,wrong-import-position
from pejax import parallel

# Each round: (request of process 0, request of process 1).
ROUNDS = ((None, None), (None, "SIGTERM"), ("SIGINT", "SIGTERM"), ("request", None),
          (None, "checkpoint_now"))


def main() -> None:
  address, count, process_id = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
  parallel.initialize_distributed(coordinator_address=address, num_processes=count,
                                  process_id=process_id, heartbeat_timeout_s=10,
                                  log=lambda line: None)
  answers = [parallel.agree_on_stop(requests[process_id]) for requests in ROUNDS]
  print("ANSWERS " + json.dumps(answers), flush=True)


if __name__ == "__main__":
  main()

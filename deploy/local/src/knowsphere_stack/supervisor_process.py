"""Entry of the detached supervisor process that ``ks-stack up`` starts in its own session.

Run as ``python -m knowsphere_stack.supervisor_process``, it reads its
:class:`~knowsphere_stack.supervisor.SupervisorPlan` as JSON from stdin (so the services' environment,
which may hold a generated ``MASTER_KEY``, never touches the disk), logs to stderr (which ``up`` points
at ``<data>/logs/supervisor.log``), and stops every child on SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from knowsphere_stack.supervisor import Supervisor, SupervisorPlan

log = logging.getLogger("knowsphere_stack.supervisor")


def main() -> None:
    """Entry of the detached supervisor: plan on stdin, run until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per health probe would drown the log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = SupervisorPlan.model_validate_json(sys.stdin.read())
    supervisor = Supervisor(plan.components, plan.run_dir, plan.policy, supervisor_pid=os.getpid())

    def _on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        supervisor.request_stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    supervisor.run()


if __name__ == "__main__":
    main()

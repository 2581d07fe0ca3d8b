"""FeS server and client managers on FedML's communication layer (`FedMLCommManager`).

FedML's FedAvg simulator cannot carry FeS's rounds (it never calls the aggregator hooks
under MPI and never tells a trainer its client id), so, like FedML's own algorithms under
`fedml/simulation/mpi/`, FeS brings its own managers. The server sends each worker the
round's tasks (which client ids it plays) with the global trainable tensors; a worker plays
those clients one after another with the FedML trainer plugin and sends back their updates;
the server aggregates through the FedML aggregator plugin and starts the next round.

Failure handling: a worker that raises reports one line to the server, naming the client
it was playing, and the server records the run as failed (`rank 2 (client 5): ...` in
summary.json and on stderr), releases every worker and exits non-zero. A silent worker is
caught by the server's watchdog (`comm_args.worker_timeout_s`); a rank that dies outright is
named by the launcher (`launcher.py`). The server checkpoints every round
(`ServerSession.phases`) and, with `resume`, continues from its run directory's checkpoint.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.constants import CommunicationConstants
from fedml.core.distributed.communication.message import Message
from fedml.core.distributed.fedml_comm_manager import FedMLCommManager

from fedml_fes.errors import one_line
from fedml_fes.report.metrics import format_row
from fedml_fes.runtime.job import Job
from fedml_fes.runtime.payload import assign_slots
from fedml_fes.runtime.phases import PhaseSequence
from fedml_fes.runtime.tasks import ClientTask, ClientUpdate
from fedml_fes_plugins.adapters.aggregator import FesAggregator
from fedml_fes_plugins.adapters.messages import (
    KEY_CLIENT,
    KEY_ERROR,
    KEY_PHASE,
    KEY_ROUND,
    KEY_TASKS,
    KEY_UPDATES,
    MSG_C2S_ERROR,
    MSG_C2S_UPDATES,
    MSG_S2C_FINISH,
    MSG_S2C_TASKS,
)
from fedml_fes_plugins.adapters.mpi_transport import use_blocking_mpi
from fedml_fes_plugins.adapters.trainer import FesTrainer
from fedml_fes_plugins.adapters.wire import tensors_from_wire, tensors_to_wire


def assign_tasks(tasks: list[ClientTask], workers: list[int]) -> dict[int, list[ClientTask]]:
    """Round-robin over worker ranks, in client-id order (deterministic); ranks with no task left out."""
    return {workers[s]: ts for s, ts in assign_slots(tasks, len(workers)).items() if ts}


class _MpiManager(FedMLCommManager):
    """FedML's comm manager with the blocking MPI receive loop (adapters/mpi_transport.py)."""

    def _init_manager(self) -> None:
        if self.backend == "MPI":
            use_blocking_mpi(self)
        else:
            super()._init_manager()


class FesServerManager(_MpiManager):
    def __init__(
        self,
        args: Any,
        job: Job,
        run_dir: Path,
        comm,
        rank: int,
        size: int,
        backend: str,
        emit: Callable[[str], None],
        on_fatal: Callable[[str], None],
        resume: bool = False,
    ):
        super().__init__(args, comm, rank, size, backend)
        self.job = job
        self.emit = emit
        self.on_fatal = on_fatal  # last resort when the comm layer cannot end the run itself
        args.fes_job = job  # what the FedML plugins share
        self.aggregator = FesAggregator(job.model, args)
        self.session = self.aggregator.open(run_dir, runtime=f"fedml_{backend.lower()}", resume=resume)
        self.server = self.session.server
        self.workers = list(range(1, size))
        self.round_idx = -1
        self.phase = ""
        self.pending: set[int] = set()
        self.updates: list[ClientUpdate] = []
        self.planned = 0
        self.started = False
        self.phases: PhaseSequence | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self._last_activity = time.monotonic()
        # FedML runs handlers on its receive thread and the watchdog runs on its own: one lock
        # keeps the watchdog from failing a run while a handler is halfway through a round
        self._lock = threading.RLock()
        self._watchdog = threading.Thread(target=self._watch, daemon=True)

    def register_message_receive_handlers(self) -> None:
        self.register_message_receive_handler(CommunicationConstants.MSG_TYPE_CONNECTION_IS_READY, self._on_ready)
        self.register_message_receive_handler(MSG_C2S_UPDATES, self._guard(self._on_updates))
        self.register_message_receive_handler(MSG_C2S_ERROR, self._guard(self._on_error))

    def _guard(self, handler):
        def run(msg):
            with self._lock:
                try:
                    handler(msg)
                except Exception as e:  # a server-side failure still ends every rank cleanly
                    self._fail(f"server failed in round {self.round_idx}: {one_line(e)}")
                finally:  # the wait for workers starts when the server has done its part
                    self._last_activity = time.monotonic()

        return run

    def _on_ready(self, _msg) -> None:
        if self.started:
            return
        self.started = True
        self._watchdog.start()
        self._guard(lambda _m: self._start())(None)

    def _start(self) -> None:
        if self.session.next_round:
            self.emit(f"resuming after round {self.session.next_round - 1} of {self.server.num_rounds}")
        self.phases = self.aggregator.phases  # the round's phases, as every runtime sequences them; checkpointed
        self._dispatch()

    def _dispatch(self) -> None:
        """Send the current phase's tasks; an empty labeling phase closes at once."""
        phases = self.phases
        if phases.done:
            self.summary = self.session.complete()
            self._release_workers()
            return
        self.round_idx, self.phase, tasks = phases.round_idx, phases.name, phases.tasks
        self.updates, self.planned = [], len(tasks)
        if not tasks and self.phase == "label":
            self._close()
            return
        params = tensors_to_wire(self.server.global_params())
        plan = assign_tasks(tasks, self.workers)
        self.pending = set(plan)
        for worker, worker_tasks in plan.items():
            msg = Message(MSG_S2C_TASKS, self.rank, worker)
            msg.add_params(KEY_ROUND, self.round_idx)
            msg.add_params(KEY_PHASE, self.phase)
            msg.add_params(KEY_TASKS, [t.to_dict() for t in worker_tasks])
            msg.add_params(Message.MSG_ARG_KEY_MODEL_PARAMS, params)
            self.send_message(msg)
        if not plan:  # nothing to wait for
            self._close()

    def _on_updates(self, msg) -> None:
        sender = msg.get_sender_id()
        if (msg.get(KEY_ROUND), msg.get(KEY_PHASE)) != (self.round_idx, self.phase) or sender not in self.pending:
            self.session.recorder.log_event(f"ignored stale message from rank {sender}")
            return
        self.pending.discard(sender)
        self.updates.extend(
            ClientUpdate(**{**u, "params": tensors_from_wire(u.get("params"))}) for u in msg.get(KEY_UPDATES)
        )
        if not self.pending:
            self._close()

    def _close(self) -> None:
        row = self.aggregator.finish_phase(self.updates)
        if row is not None:
            self.emit(format_row(row, self.job.method.primary_metric))
        self._dispatch()

    def _on_error(self, msg) -> None:
        client = msg.get(KEY_CLIENT)
        who = f"rank {msg.get_sender_id()}" + (f" (client {client})" if client is not None else "")
        self._fail(f"{who}: failed in round {msg.get(KEY_ROUND)} ({msg.get(KEY_PHASE)} phase): {msg.get(KEY_ERROR)}")

    def _fail(self, error: str) -> None:
        if self.error is not None:
            return
        self.error = error
        self.summary = self.session.fail(error)
        self._release_workers()

    def _release_workers(self) -> None:
        for worker in self.workers:
            self.send_message(Message(MSG_S2C_FINISH, self.rank, worker))
        self.pending = set()
        self.finish()

    def _watch(self) -> None:
        timeout = self.job.cfg.comm.worker_timeout_s
        while True:
            time.sleep(min(1.0, timeout / 4))
            with self._lock:  # never while a handler is running
                if self.summary is not None:
                    return
                if not (self.pending and time.monotonic() - self._last_activity > timeout):
                    continue
                error = (
                    f"no answer from worker ranks {sorted(self.pending)} in round {self.round_idx} "
                    f"for {timeout:.0f}s (comm_args.worker_timeout_s)"
                )
                self.error = error
                self.summary = self.session.fail(error)
            self.on_fatal(error)
            return


class FesClientManager(_MpiManager):
    def __init__(self, args: Any, job: Job, comm, rank: int, size: int, backend: str):
        super().__init__(args, comm, rank, size, backend)
        self.job = job
        args.fes_job = job
        self.trainer = FesTrainer(job.model, args)
        self.failed = False

    def register_message_receive_handlers(self) -> None:
        self.register_message_receive_handler(CommunicationConstants.MSG_TYPE_CONNECTION_IS_READY, lambda _m: None)
        self.register_message_receive_handler(MSG_S2C_TASKS, self._on_tasks)
        self.register_message_receive_handler(MSG_S2C_FINISH, lambda _m: self.finish())

    def _on_tasks(self, msg) -> None:
        r = msg.get(KEY_ROUND)
        params = tensors_from_wire(msg.get(Message.MSG_ARG_KEY_MODEL_PARAMS))
        reply = Message(MSG_C2S_UPDATES, self.rank, 0)
        playing = None
        try:
            updates = []
            for t in msg.get(KEY_TASKS):
                task = ClientTask.from_dict(t)
                playing = task.client_id
                updates.append(self.trainer.run_task(task, params))
        except Exception as e:
            self.failed = True
            reply = Message(MSG_C2S_ERROR, self.rank, 0)
            reply.add_params(KEY_ERROR, one_line(e))
            if playing is not None:
                reply.add_params(KEY_CLIENT, playing)
        else:
            reply.add_params(KEY_UPDATES, [{**vars(u), "params": tensors_to_wire(u.params)} for u in updates])
        reply.add_params(KEY_ROUND, r)
        reply.add_params(KEY_PHASE, msg.get(KEY_PHASE))
        self.send_message(reply)

"""A cross-silo client process ("silo", rank k >= 1): plays its emulated devices for the server.

It owns devices `c` with `1 + c % K == k`; their state (pseudo labels) is in this process's
own run directory, as on a phone's disk, so a silo restarted on the same directory picks
up where its devices were. At the first message of each round it hard-links its devices'
folders into a snapshot of the round before (`runtime/checkpoint.py`); a server that is
starting says which round its run continues after, and the silo makes its devices' folders
what they were then: empty for a fresh run, the snapshot for a resumed one. It joins the
server (retrying until the server answers or `comm_args.join_timeout_s` passes), then
answers task messages with the FedML trainer plugin until the server says the run is over,
or nothing has come for `comm_args.worker_timeout_s` (the server is gone).

On a slow or breaking link: an answer whose send fails (the connection cut mid-message, the
silo partitioned, the server restarting) is sent again every `RESEND_S` until it gets through
or `comm_args.round_timeout_s` has passed since its tasks came (the server has dropped this
silo for the phase by then); the server takes the first copy of a phase's answer and ignores
any other, so nothing is averaged twice. After a failed send, and after hearing nothing from
the server for `round_timeout_s` (a silo the server dropped gets no more messages), the silo
joins again with its devices' stored state; a server that has restarted answers that join
with the round its run continues after, and the silo restores its devices to it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable

from fedml_fes.errors import FesError, one_line
from fedml_fes.runtime.checkpoint import prune_snapshots, restore_clients, snapshot_clients
from fedml_fes.runtime.job import Job
from fedml_fes_plugins.adapters import messages as m
from fedml_fes_plugins.adapters.trainer import FesTrainer
from fedml_fes_plugins.adapters.wire import tensors_from_wire
from fedml_fes_plugins.cross_silo import protocol as p
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings
from fedml_fes_plugins.cross_silo.node import CONNECTED, QueuedCommManager

JOIN_RETRY_S = 1.0
RESEND_S = 1.0  # a failed answer is sent again this often, within the phase's round_timeout_s
KEEP_SNAPSHOTS = 2  # a starting server continues after the last round it saw, or the one before


class SiloClient(QueuedCommManager):
    def __init__(self, args: Any, job: Job, settings: CrossSiloSettings, rank: int, emit: Callable[[str], None]):
        super().__init__(args, settings, rank=rank)
        self.job = job
        self.emit = emit
        args.fes_job = job  # what the FedML plugins share
        self.trainer = FesTrainer(job.model, args)
        self.session_id = uuid.uuid4().hex
        self.devices = [c.client_id for c in job.data.clients if settings.owner_rank(c.client_id) == rank]
        self.status: str | None = None  # the server's verdict on the run
        self.run_dir = job.store.root.parent
        self.seen_round = -1  # the newest round a message has come for
        self.rejoin = False  # a send failed: join again once the server is reachable

    def play(self) -> None:
        self.run_role(self._run)

    def _run(self) -> None:
        self._join()
        self._serve()

    # ---- joining ---------------------------------------------------------------------
    def stored_state(self) -> dict[str, int]:
        """Pseudo labels each of this silo's devices holds on disk (JSON-safe keys)."""
        if not self.job.method.uses_pseudo:
            return {}
        counts = {c: len(self.job.store.load_pseudo(c)) for c in self.devices}
        return {str(c): n for c, n in counts.items() if n}

    def _send_join(self) -> str | None:
        return self.send(
            self.message(
                m.MSG_C2S_JOIN,
                0,
                **{
                    m.KEY_RANK: self.rank,
                    m.KEY_SESSION: self.session_id,
                    m.KEY_FINGERPRINT: self.settings.fingerprint,
                    m.KEY_STATE: self.stored_state(),
                },
            )
        )

    def _join(self) -> None:
        s = self.settings
        deadline = time.monotonic() + s.join_timeout_s
        connected = s.backend == "GRPC"  # MQTT: subscribe first, or the welcome is lost
        last_try, last_error = 0.0, None
        while True:
            now = time.monotonic()
            if now >= deadline:
                why = f" (last error: {last_error})" if last_error else ""
                raise FesError(
                    f"silo rank {self.rank}: no answer from the server ({s.where(0)}) within "
                    f"{s.join_timeout_s:.0f}s (comm_args.join_timeout_s){why}"
                )
            if connected and now - last_try >= JOIN_RETRY_S:
                last_try, last_error = now, self._send_join()
            got = self.next_message(min(JOIN_RETRY_S, deadline - now))
            if got is None:
                continue
            msg_type, msg = got
            if msg_type == CONNECTED:
                connected = True
            elif msg_type == m.MSG_S2C_WELCOME:
                if msg.get(m.KEY_ERROR):
                    raise FesError(f"the server refused silo rank {self.rank}: {msg.get(m.KEY_ERROR)}")
                start = self._start_after(msg.get(m.KEY_START_AFTER))
                state = ", ".join(f"client {c}: {n} pseudo labels" for c, n in self.stored_state().items())
                held = f"; resuming with stored state ({state})" if state else ""
                self.emit(f"silo {self.rank}: joined the server, playing clients {self.devices}{start}{held}")
                return
            elif msg_type == m.MSG_S2C_FINISH:
                raise FesError(
                    f"silo rank {self.rank}: the run ended before it joined "
                    f"({msg.get(m.KEY_STATUS)}: {msg.get(m.KEY_ERROR)})"
                )

    def _start_after(self, after: Any) -> str:
        """The devices' folders as the server's run starts (None: a restart mid-run, keep them)."""
        if after is None:
            return ""
        after = int(after)
        if after < 0:
            restore_clients(self.run_dir, -1)
            return ""
        if restore_clients(self.run_dir, after):
            return f"; devices restored to the end of round {after}"
        return f"; no snapshot of round {after} here, devices keep their stored state"

    def _snapshot(self, round_idx: int) -> None:
        """First message of a round: the devices' folders are the end of the round before."""
        if round_idx <= self.seen_round:
            return
        self.seen_round = round_idx
        if round_idx >= 1:
            snapshot_clients(self.run_dir, round_idx - 1)
            prune_snapshots(self.run_dir, keep=KEEP_SNAPSHOTS)

    # ---- serving ---------------------------------------------------------------------
    def _serve(self) -> None:
        idle = self.settings.idle_timeout_s
        rejoin_after = self.settings.round_timeout_s
        heard = last_join = time.monotonic()
        while True:
            now = time.monotonic()
            if now - heard >= idle:
                raise FesError(
                    f"silo rank {self.rank}: nothing from the server for {idle:.0f}s "
                    f"(comm_args.worker_timeout_s); giving up"
                )
            if self.rejoin or now - max(heard, last_join) >= rejoin_after:
                # the server may have dropped or forgotten this silo: it takes a join back
                # with the stored state (a duplicate join of an online silo is ignored)
                last_join = now
                self.rejoin = self._send_join() is not None
            got = self.next_message(min(JOIN_RETRY_S if self.rejoin else rejoin_after, idle - (now - heard)))
            if got is None:
                continue
            heard = time.monotonic()
            msg_type, msg = got
            if msg_type == m.MSG_S2C_FINISH:
                self.status = str(msg.get(m.KEY_STATUS))
                error = msg.get(m.KEY_ERROR)
                self.emit(f"silo {self.rank}: the server ended the run ({self.status}{': ' + error if error else ''})")
                return
            if msg_type == m.MSG_S2C_TASKS:
                self._on_tasks(msg)
            elif msg_type == m.MSG_S2C_WELCOME:
                self._on_welcome_again(msg)
            elif msg_type == CONNECTED:  # MQTT reconnected: tell the server we are here
                self._send_join()

    def _on_welcome_again(self, msg: Any) -> None:
        """The answer to a join sent mid-run: a starting (restarted) server names the round its
        run continues after, and the devices' folders become what they were then."""
        if msg.get(m.KEY_ERROR):
            raise FesError(f"the server refused silo rank {self.rank}: {msg.get(m.KEY_ERROR)}")
        after = msg.get(m.KEY_START_AFTER)
        if after is None:
            return
        start = self._start_after(after)
        self.seen_round = int(after)
        self.emit(f"silo {self.rank}: joined the restarted server, continuing after round {int(after)}{start}")

    def _on_tasks(self, msg: Any) -> None:
        got_at = time.monotonic()
        r, phase = msg.get(m.KEY_ROUND), msg.get(m.KEY_PHASE)
        if isinstance(r, int):
            self._snapshot(r)
        reply = self.message(m.MSG_C2S_UPDATES, 0, **{m.KEY_ROUND: r, m.KEY_PHASE: phase})
        try:
            tasks = p.parse_tasks(msg.get(m.KEY_TASKS))
        except (KeyError, TypeError, ValueError) as e:
            reply.add_params(m.KEY_ERROR, f"unreadable tasks: {one_line(e)}")
            self._answer(reply, r, phase, deadline=got_at + self.settings.round_timeout_s)
            return
        if tasks:
            updates, errors = self._play(tasks, tensors_from_wire(msg.get(p.PAYLOAD)))
            reply.add_params(p.PAYLOAD, [p.update_to_wire(u) for u in updates])
            if errors:
                reply.add_params(m.KEY_ERROR, "; ".join(errors))
        self._answer(reply, r, phase, deadline=got_at + self.settings.round_timeout_s)

    def _answer(self, reply: Any, r: Any, phase: Any, deadline: float) -> None:
        """Send, and again every RESEND_S while it fails, until the phase's deadline."""
        tries = 0
        while (err := self.send(reply)) is not None:
            tries += 1
            self.rejoin = True
            if time.monotonic() + RESEND_S >= deadline:
                self.emit(f"silo {self.rank}: could not answer round {r} {phase}: {err}")
                return
            self.emit(f"silo {self.rank}: answer to round {r} {phase} failed ({err}); sending it again")
            time.sleep(RESEND_S)
        if tries:
            self.emit(f"silo {self.rank}: answer to round {r} {phase} sent on try {tries + 1}")

    def _play(self, tasks: list, params: Any) -> tuple[list, list[str]]:
        updates, errors = [], []
        for t in tasks:
            if t.client_id not in self.devices:
                errors.append(f"client {t.client_id} is not played by silo rank {self.rank}")
                continue
            try:
                updates.append(self.trainer.run_task(t, params))
            except Exception as e:  # one device failing is its own dropout, not the silo's
                errors.append(f"client {t.client_id}: {one_line(e)}")
        return updates, errors

"""The cross-silo server (rank 0): FeS rounds over FedML gRPC / MQTT_S3 with silos that may drop.

Same round logic as the in-process and mpirun runtimes (`RoundServer` through
`ServerSession`, the FedML `ServerAggregator` plugin); what differs is that silos are other
machines. So:
- it starts when every silo has joined (with the same job), or fails naming the missing;
- each phase waits for the silos it gave tasks up to `comm_args.round_timeout_s`, then
  aggregates what arrived; a silo that missed the deadline or could not be reached is
  dropped (logged in events.log) and gets no tasks until it joins again;
- a silo that joins again (restarted) reports its devices' stored state and plays from the
  next phase on;
- the server saves a checkpoint after every round (`ServerSession`); started with `resume`,
  it continues after the checkpointed round, and every silo that joins while it starts is
  told that round (`KEY_START_AFTER`, -1 for a fresh run) and makes its devices' folders what
  they were then (its own per-round snapshots), so a resumed run plays as the uninterrupted
  one did;
- what comes back is parsed defensively: malformed updates are rejected and logged, and
  RoundServer rejects non-finite or mis-shaped tensors; nothing invalid is averaged in.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from fedml_fes.errors import FesError, one_line
from fedml_fes.report.metrics import format_row
from fedml_fes.runtime.job import Job
from fedml_fes.runtime.phases import PhaseSequence
from fedml_fes.runtime.tasks import ClientTask, ClientUpdate
from fedml_fes_plugins.adapters import messages as m
from fedml_fes_plugins.adapters.aggregator import FesAggregator
from fedml_fes_plugins.adapters.wire import tensors_to_wire
from fedml_fes_plugins.cross_silo import protocol as p
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings
from fedml_fes_plugins.cross_silo.node import CONNECTED, QueuedCommManager

SEND_THREADS = 32  # gRPC: a phase's messages in flight at once


class SiloServer(QueuedCommManager):
    def __init__(
        self,
        args: Any,
        job: Job,
        run_dir: Path,
        settings: CrossSiloSettings,
        emit: Callable[[str], None],
        resume: bool = False,
    ):
        super().__init__(args, settings, rank=0)
        self.job = job
        self.emit = emit
        args.fes_job = job  # what the FedML plugins share
        self.aggregator = FesAggregator(job.model, args)
        self.session = self.aggregator.open(
            run_dir, runtime=f"fedml_cross_silo_{settings.backend.lower()}", resume=resume
        )
        # the round this run continues after (-1: fresh): what the starting silos restore
        self.start_after = -1 if self.session.checkpointed is None else self.session.checkpointed
        self.server = self.session.server
        if resume:
            emit(f"resuming after round {self.start_after} of {self.server.num_rounds}")
        self.sessions: dict[int, str] = {}  # rank -> the process that joined last (they get FINISH)
        self.online: set[int] = set()  # silos that get tasks
        self.round_idx = -1
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self._unlabeled = {c.client_id: set(c.unlabeled.example_ids) for c in job.data.clients}
        self._num_classes = len(job.data.classes)

    # ---- whole run -------------------------------------------------------------------
    def serve(self) -> None:
        self.run_role(self._run)

    def _run(self) -> None:
        try:
            self._wait_for_silos()
            phases = self.aggregator.phases  # the round's phases, as every runtime sequences them; checkpointed
            while not phases.done:
                self._phase_of(phases)
            self.summary = self.session.complete()
        except FesError as e:
            self._fail(str(e))
        except Exception as e:  # keep finished rounds and end every silo
            self._fail(f"server failed in round {self.round_idx}: {one_line(e)}")
        finally:
            self._release()

    def _fail(self, error: str) -> None:
        self.error = error
        self.summary = self.session.fail(error)

    def _release(self) -> None:
        status = "failed" if self.error else "completed"
        for rank in sorted(self.sessions):
            self.send(self.message(m.MSG_S2C_FINISH, rank, **{m.KEY_STATUS: status, m.KEY_ERROR: self.error or ""}))

    def log(self, line: str) -> None:
        self.session.recorder.log_event(line)
        self.emit(line)

    # ---- joining ---------------------------------------------------------------------
    def _wait_for_silos(self) -> None:
        s = self.settings
        deadline = time.monotonic() + s.join_timeout_s
        while len(self.online) < s.silo_num:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in s.ranks if r not in self.online]
                raise FesError(
                    f"silo rank(s) {missing} did not join within {s.join_timeout_s:.0f}s "
                    f"(comm_args.join_timeout_s): are they running, with this config, and can they "
                    f"reach the server ({s.where(0)})?"
                )
            got = self.next_message(min(left, 1.0))
            if got is not None:
                self._handle_idle(*got, starting=True)
        tls = getattr(self.com_manager, "tls", None) if s.backend == "GRPC" else s.tls(0)
        self.emit(f"silos joined: ranks {s.ranks} over {s.backend} ({'TLS' if tls else 'plaintext'})")

    def _handle_idle(self, msg_type: Any, msg: Any, starting: bool = False) -> None:
        """A message outside the phase being waited for."""
        if msg_type == m.MSG_C2S_JOIN:
            self._on_join(msg, starting)
        elif msg_type == m.MSG_C2S_UPDATES:
            self._seen_alive(self.settings.rank_of(msg.get_sender_id()))
        elif msg_type != CONNECTED:
            self.session.recorder.log_event(f"ignored message '{msg_type}' from {msg.get_sender_id()}")

    def _on_join(self, msg: Any, starting: bool) -> tuple[int | None, str]:
        """Admit a silo; says how: first | duplicate (join retry) | back (same process) | restarted."""
        rank = self.settings.rank_of(msg.get_sender_id())
        if rank is None or rank == 0 or msg.get(m.KEY_RANK) != rank:
            self.session.recorder.log_event(f"ignored a join from unknown sender {msg.get_sender_id()!r}")
            return None, ""
        if msg.get(m.KEY_FINGERPRINT) != self.settings.fingerprint:
            error = (
                f"silo rank {rank} runs another job (fingerprint {msg.get(m.KEY_FINGERPRINT)} != "
                f"{self.settings.fingerprint}): start every process with the same config and fedml-fes version"
            )
            self.send(self.message(m.MSG_S2C_WELCOME, rank, **{m.KEY_ERROR: error}))
            if starting:
                raise FesError(error)
            self.log(f"refused {error}")
            return None, ""
        welcome = {m.KEY_ERROR: ""}
        if starting:  # the silo's devices start where this run starts, not where its disk is
            welcome[m.KEY_START_AFTER] = self.start_after
        if (err := self.send(self.message(m.MSG_S2C_WELCOME, rank, **welcome))) is not None:
            self.session.recorder.log_event(f"could not welcome silo rank {rank}: {err}")
            return None, ""
        session = str(msg.get(m.KEY_SESSION))
        previous = self.sessions.get(rank)
        self.sessions[rank] = session
        if previous is None:
            kind = "first"
        elif previous != session:
            kind = "restarted"
        else:
            kind = "duplicate" if rank in self.online else "back"
        self.online.add(rank)
        if kind == "duplicate" or starting:  # starting: the silo restores to this run's start, not its disk
            return rank, kind
        state = {
            c: n
            for c, n in p.parse_state(msg.get(m.KEY_STATE)).items()
            if c in self._unlabeled and self.settings.owner_rank(c) == rank
        }
        for c, n in state.items():  # the device's disk is the truth for what it holds
            self.server.pseudo_counts[c] = n
        if kind != "first" or state:
            held = ", ".join(f"client {c}: {n} pseudo labels" for c, n in sorted(state.items())) or "none"
            verb = {"first": "joined", "restarted": "rejoined (restarted)", "back": "is back"}[kind]
            self.log(f"silo rank {rank} {verb} before round {max(self.round_idx, 0)} with stored state: {held}")
        return rank, kind

    # ---- rounds ----------------------------------------------------------------------
    def _phase_of(self, phases: PhaseSequence) -> None:
        """Run the current phase on the silos (an empty labeling phase sends nothing)."""
        r, name, tasks = phases.round_idx, phases.name, phases.tasks
        self.round_idx = r
        updates = self._phase(r, name, tasks) if tasks or name == "train" else []
        try:
            row = self.aggregator.finish_phase(updates)
        except FesError as e:
            if name != "train":
                raise
            raise FesError(f"{e} ({len(updates)} of {len(tasks)} planned updates arrived; see events.log)") from None
        if row is not None:
            self.emit(format_row(row, self.job.method.primary_metric))

    def _drain(self) -> None:
        while (got := self.next_message(0)) is not None:
            self._handle_idle(*got)

    def _phase(self, r: int, phase: str, tasks: list[ClientTask]) -> list[ClientUpdate]:
        """Send each online silo its tasks (others a ping), then collect until done or deadline."""
        self._drain()  # joins that arrived since the last phase
        s = self.settings
        by_rank: dict[int, list[ClientTask]] = {}
        for t in sorted(tasks, key=lambda t: t.client_id):
            by_rank.setdefault(s.owner_rank(t.client_id), []).append(t)
        offline = {rank: ts for rank, ts in by_rank.items() if rank not in self.online}
        for rank, ts in sorted(offline.items()):
            self.log(f"round {r} {phase}: clients {[t.client_id for t in ts]} skipped: silo rank {rank} is offline")
        params = tensors_to_wire(self.server.global_params())
        pending: dict[int, dict[int, ClientTask]] = {}
        outgoing: list[tuple[int, list[ClientTask], Any]] = []
        for rank in sorted(self.online):
            ts = by_rank.get(rank, [])
            msg = self.message(
                m.MSG_S2C_TASKS, rank, **{m.KEY_ROUND: r, m.KEY_PHASE: phase, m.KEY_TASKS: [t.to_dict() for t in ts]}
            )
            if ts:
                msg.add_params(p.PAYLOAD, params)
            outgoing.append((rank, ts, msg))
        for (rank, ts, _), err in zip(outgoing, self._send_all([msg for _, _, msg in outgoing])):
            if err is not None:
                self._drop(rank, r, phase, ts, f"could not be reached ({err})")
            elif ts:
                pending[rank] = {t.client_id: t for t in ts}
        return self._collect(r, phase, pending)

    def _send_all(self, msgs: list[Any]) -> list[str | None]:
        """Send a phase's messages; each one's error or None.

        gRPC: all at once, one thread each (bounded): every silo has its own link, and sent
        one after another a round's down leg would cost one message per silo on a slow link
        (measured: 3 x 1.22 s with 3 silos at 200 ms, docs/BENCHMARK.md). MQTT_S3: one after
        another, the first uploading the global tensors to S3 once and the others naming the
        same object (the broker fans out; each silo downloads over its own link)."""
        if self.settings.backend == "GRPC" and len(msgs) > 1:
            with ThreadPoolExecutor(max_workers=min(len(msgs), SEND_THREADS)) as pool:
                return list(pool.map(self.send, msgs))
        errors: list[str | None] = []
        shared: dict[str, Any] = {}  # MQTT_S3: one S3 upload of the global tensors per phase
        keys = (p.Message.MSG_ARG_KEY_MODEL_PARAMS_URL, p.Message.MSG_ARG_KEY_MODEL_PARAMS_KEY)
        for msg in msgs:
            carries = msg.get(p.PAYLOAD) is not None  # asked before the send (FedML may move it)
            if carries:
                msg.get_params().update(shared)
            errors.append(err := self.send(msg))
            if err is None and carries and not shared:
                shared = {k: msg.get(k) for k in keys if msg.get(k)}
        return errors

    def _collect(self, r: int, phase: str, pending: dict[int, dict[int, ClientTask]]) -> list[ClientUpdate]:
        updates: list[ClientUpdate] = []
        deadline = time.monotonic() + self.settings.round_timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                for rank, ts in sorted(pending.items()):
                    self._drop(
                        rank,
                        r,
                        phase,
                        list(ts.values()),
                        f"sent nothing within {self.settings.round_timeout_s:g}s (comm_args.round_timeout_s)",
                    )
                break
            got = self.next_message(min(left, 1.0))
            if got is None:
                continue
            msg_type, msg = got
            if msg_type == m.MSG_C2S_JOIN:
                rank, kind = self._on_join(msg, starting=False)
                if rank in pending and kind == "restarted":  # the tasks its predecessor held are lost
                    self._drop(rank, r, phase, list(pending.pop(rank).values()), "restarted", keep_online=True)
                continue
            if msg_type != m.MSG_C2S_UPDATES:
                self._handle_idle(msg_type, msg)
                continue
            rank = self.settings.rank_of(msg.get_sender_id())
            if (msg.get(m.KEY_ROUND), msg.get(m.KEY_PHASE)) != (r, phase) or rank not in pending:
                self._seen_alive(rank)
                if msg.get(p.PAYLOAD):  # a late answer (pings have none)
                    self.session.recorder.log_event(
                        f"round {r} {phase}: ignored a late answer from silo rank {rank} "
                        f"(round {msg.get(m.KEY_ROUND)} {msg.get(m.KEY_PHASE)})"
                    )
                continue
            got_updates, problems = p.parse_updates(msg.get(p.PAYLOAD), r, pending.pop(rank), self._check_labels)
            for problem in problems:
                self.log(f"round {r} {phase}: rejected from silo rank {rank}: {problem}")
            if msg.get(m.KEY_ERROR):
                self.log(f"round {r} {phase}: silo rank {rank} reported: {msg.get(m.KEY_ERROR)}")
            updates.extend(got_updates)
        return updates

    def _seen_alive(self, rank: int | None) -> None:
        """A late answer from a silo dropped for silence: the same process is alive, take it back."""
        if rank in self.sessions and rank not in self.online:
            self.online.add(rank)
            self.log(f"silo rank {rank} is back (a late answer arrived in round {self.round_idx})")

    def _drop(
        self, rank: int, r: int, phase: str, tasks: list[ClientTask], why: str, keep_online: bool = False
    ) -> None:
        if not keep_online:
            self.online.discard(rank)
        lost = f"; updates of clients {[t.client_id for t in tasks]} lost" if tasks else ""
        self.log(f"round {r} {phase}: silo rank {rank} dropped: {why}{lost}")

    def _check_labels(self, client_id: int, ids: list, labels: list) -> str | None:
        """Evaluator-side sanity of a labeling report (it is scored against the hidden truth)."""
        pool = self._unlabeled.get(client_id, set())
        if any(i not in pool for i in ids):
            return "example ids outside the client's unlabeled pool"
        if any(not 0 <= y < self._num_classes for y in labels):
            return f"labels outside 0..{self._num_classes - 1}"
        return None

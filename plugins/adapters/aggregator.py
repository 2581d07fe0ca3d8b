"""The FeS server as FedML's `ServerAggregator`: one class, driven by every runtime.

All round logic (selection, labeling plan, validation, aggregation, evaluation) is the
`RoundServer`'s, sequenced phase by phase by `PhaseSequence` and recorded and checkpointed by
`ServerSession`; this object holds them. Two kinds of driver use it:

- FedML's cross-silo runtime (a user's own `FedMLRunner(...)` script) through FedML's hooks:
  `get_model_params` gives the phase's message (its plan inside the params dict,
  `fedml_fes/runtime/payload.py`), `on_before_aggregation` unpacks the silos' answers,
  `aggregate` closes the phase and returns the next message, `test` reports the scores the
  round logic already computed;
- the project's own runtimes (in-process, the MPI managers, the cross-silo server) through
  `open()`, `phases` and `finish_phase(updates)`, moving the same tasks and updates by
  function call or their own messages.

FedAvg itself (the update screen and the weighted average) and evaluation are `FedAvgCore`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, NoReturn

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core import ServerAggregator

from fedml_fes.errors import FesError, one_line
from fedml_fes.report.metrics import format_row
from fedml_fes.runtime.aggregator import FedAvgCore
from fedml_fes.runtime.job import Job
from fedml_fes.runtime.payload import PLAN_KEY, pack_plan, unpack_updates
from fedml_fes.runtime.phases import PhaseSequence
from fedml_fes.runtime.session import ServerSession
from fedml_fes.runtime.tasks import ClientUpdate
from fedml_fes_plugins.adapters.hard_exit import abort_mpi, leave


def job_of(model, args: Any) -> Job:
    """The FeS job the plugins share through `args.fes_job` (FedML's plugins share the model)."""
    job = getattr(args, "fes_job", None)
    if job is None or job.model is not model:
        raise FesError(
            "build the model with fedml_plugin.create_model(args, dataset) before the FeS trainer "
            "and aggregator: they train the model that call builds"
        )
    return job


def run_dir_of(args: Any) -> Path:
    run_dir = getattr(args, "fes_run_dir", None)
    if not run_dir:
        raise FesError("args.fes_run_dir is not set: build args with fedml_fes_plugins.fedml_plugin.init()")
    return Path(run_dir)


def abort(args: Any, code: int = 1) -> NoReturn:
    """A raised error would leave the other processes waiting: under MPI end every rank;
    over gRPC end this process (each silo's ServerWatch then ends that silo)."""
    comm = getattr(args, "comm", None)
    if comm is not None:
        abort_mpi(comm, code)
    leave(code)


class FesAggregator(ServerAggregator):
    def __init__(self, model, args: Any):
        super().__init__(model, args)
        self.job = job_of(model, args)
        self.core = FedAvgCore(self.job)
        self.slots = int(getattr(args, "worker_num", 0) or 0)  # FedMLRunner: the silos a plan is split over
        self._session: ServerSession | None = None
        self._phases: PhaseSequence | None = None
        self._results: list[ClientUpdate] = []
        self.summary: dict[str, Any] | None = None

    # ---- the run: opened by a runtime, or by FedML's first hook call ----------------------
    def open(self, run_dir: Path, runtime: str, resume: bool = False) -> ServerSession:
        """Start the run's records in `run_dir` (and the zero-shot evaluation), or continue the
        checkpointed run there (`resume`)."""
        self._session = ServerSession(self.job, self.core, run_dir, runtime=runtime, resume=resume)
        return self._session

    @property
    def session(self) -> ServerSession:
        # Every rank of a FedMLRunner script builds both plugins; only the server's aggregator
        # is used, so its run starts at the first hook FedML calls on it.
        if self._session is None:  # `fes_resume`: fedml_plugin.init() was given --resume
            resume = bool(getattr(self.args, "fes_resume", False))
            self.open(run_dir_of(self.args), runtime="fedml_cross_silo", resume=resume)
        return self._session

    @property
    def phases(self) -> PhaseSequence:
        """The run's phases from the next round on, checkpointed after every round."""
        if self._phases is None:
            self._phases = self.session.phases()
        return self._phases

    def finish_phase(self, updates: list[ClientUpdate]) -> dict[str, Any] | None:
        """Close the current phase with the updates that arrived; the round's metrics row when
        the phase ended a round."""
        return self.phases.finish(updates)

    # ---- FedML's hooks (FedMLRunner) -----------------------------------------------------
    def _message(self):
        """The next phase's message: its plan, with the global tensors if any silo works."""
        params = self.session.server.global_params() if self.phases.tasks else OrderedDict()
        return pack_plan(params, self.phases.round_idx, self.phases.name, self.phases.tasks, self.slots)

    def get_model_params(self):
        return self._message()

    def set_model_params(self, model_parameters) -> None:
        # FedML hands back what `aggregate` returned: the global tensors are already loaded
        params = OrderedDict((k, v) for k, v in model_parameters.items() if k != PLAN_KEY)
        if params:
            self.core.set_model_params(params)

    def _fail(self, error: str) -> NoReturn:
        """Record the run as failed (summary.json), say it in one line, end the processes."""
        print(f"error: {error}", flush=True)
        self.session.fail(error)
        abort(self.args)

    def on_before_aggregation(self, raw_client_model_or_grad_list):
        try:
            self._results = [u for _n, payload in raw_client_model_or_grad_list for u in unpack_updates(payload)]
        except FesError as e:
            self._fail(f"failed in round {self.phases.round_idx}: {e}")
        return raw_client_model_or_grad_list, list(range(len(raw_client_model_or_grad_list)))

    def aggregate(self, raw_client_model_or_grad_list):
        try:
            row = self.finish_phase(self._results)
        except Exception as e:
            self._fail(f"failed in round {self.phases.round_idx}: {one_line(e)}")
        if row is not None:
            print(format_row(row, self.job.method.primary_metric), flush=True)
        if self.phases.done and self.summary is None:
            self.summary = self.session.complete()
            print(
                f"done: {self.job.method.primary_metric}={self.summary.get('final')} "
                f"(summary.json in {self.session.run_dir})",
                flush=True,
            )
        return self._message()

    def test(self, test_data, device, args) -> dict[str, float]:
        return dict(self.session.server.last_scores)

    def test_all(self, train_data_local_dict, test_data_local_dict, device, args) -> bool:
        return True

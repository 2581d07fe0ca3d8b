"""The FeS client as FedML's `ClientTrainer`: one class, driven by every runtime.

A FedML "client" is a process (a silo, an MPI worker); a FeS client is one of the emulated
phones whose data every process can read. So this trainer plays whichever FeS clients it is
given, one after another, each from the global tensors, with `LocalTrainer` (the method's
labeling pass or local training, cost-metered):

- under FedML's cross-silo runtime (a user's `FedMLRunner(...)` script) the server's message
  carries the phase's plan inside the params dict (`fedml_fes/runtime/payload.py`):
  `set_model_params` takes this silo's tasks (its slot is FedML's `set_id(rank - 1)`),
  `train` plays them, `get_model_params` answers with every update (or the error);
- the project's runtimes call `run_task(task, global_params)`: FedML's call sequence for one
  client (id, model, hooks, train), errors raised to the caller, which names the client.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core import ClientTrainer

from fedml_fes.errors import one_line
from fedml_fes.runtime.client import LocalTrainer
from fedml_fes.runtime.payload import PLAN_KEY, pack_error, pack_updates, unpack_plan
from fedml_fes.runtime.tasks import ClientTask, ClientUpdate
from fedml_fes_plugins.adapters.aggregator import job_of


class FesTrainer(ClientTrainer):
    def __init__(self, model, args: Any):
        super().__init__(model, args)
        self.local = LocalTrainer(job_of(model, args))
        self._global: "OrderedDict" = OrderedDict()
        self._tasks: list[ClientTask] = []
        self._updates: list[ClientUpdate] = []
        self._error: str | None = None

    def set_model_params(self, model_parameters) -> None:
        """A FedMLRunner message (a plan inside: this silo's tasks), or the global tensors."""
        if PLAN_KEY not in model_parameters:
            self._global = model_parameters
            return
        watch = getattr(self.args, "fes_server_watch", None)
        if watch is not None:  # the server is up: from now on its exit ends this silo
            watch.heard()
        params, self._tasks = unpack_plan(model_parameters, int(self.id))
        if params:
            self._global = params

    def get_model_params(self):
        if self._error is not None:
            return pack_error(f"rank {int(self.id) + 1}: {self._error}")
        return pack_updates(self._updates)

    def _play(self) -> None:
        job = self.local.job
        self._updates = []
        for task in self._tasks:
            self.local.set_params(self._global)
            self._updates.append(self.local.run(task, job.data.clients[task.client_id]))

    def train(self, train_data, device, args) -> None:
        self._error = None
        try:
            self._play()
        except Exception as e:  # reported to the server in the answer, which ends the run
            self._error = f"client {self._tasks[len(self._updates)].client_id}: {one_line(e)}"

    def test(self, test_data, device, args) -> None:
        return None  # the server evaluates the global model

    def run_task(self, task: ClientTask, global_params) -> ClientUpdate:
        """FedML's call sequence for one client: id, model, hooks, training, its update."""
        self.set_id(task.client_id)
        self._tasks = [task]
        self.set_model_params(global_params if global_params is not None else OrderedDict())
        client_data = self.local.job.data.clients[task.client_id]
        device = self.local.job.device
        self.on_before_local_training(client_data, device, self.args)
        self._play()
        self.on_after_local_training(client_data, device, self.args)
        update, self._updates = self._updates[0], []  # the caller's alone (it may park it on disk)
        return update

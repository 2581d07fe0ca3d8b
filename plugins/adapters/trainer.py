"""FedML `ClientTrainer` plugin: plays whichever client the task names."""
from __future__ import annotations

from typing import Any

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core import ClientTrainer

from fedml_fes.runtime.client import LocalTrainer
from fedml_fes.runtime.job import Job
from fedml_fes.runtime.tasks import ClientTask, ClientUpdate


class FesClientTrainer(ClientTrainer):
    """FedML never tells a trainer its client id in MPI simulation; our task message does."""

    def __init__(self, job: Job, args: Any):
        super().__init__(job.model, args)
        self.local = LocalTrainer(job)
        self.task: ClientTask | None = None
        self.last_update: ClientUpdate | None = None

    def set_task(self, task: ClientTask) -> None:
        self.task = task
        self.set_id(task.client_id)

    def get_model_params(self):
        return self.local.get_params()

    def set_model_params(self, model_parameters) -> None:
        self.local.set_params(model_parameters)

    def train(self, train_data, device, args) -> None:
        if self.task is None:
            raise RuntimeError("FesClientTrainer.train called before set_task")
        self.last_update = self.local.run(self.task, train_data)

    def run_task(self, task: ClientTask, global_params) -> ClientUpdate:
        """The FedML call sequence for one client: set id/model, hooks, train, read update."""
        self.set_task(task)
        self.set_model_params(global_params)
        client_data = self.local.job.data.clients[task.client_id]
        self.on_before_local_training(client_data, self.local.job.device, self.args)
        self.train(client_data, self.local.job.device, self.args)
        self.on_after_local_training(client_data, self.local.job.device, self.args)
        return self.last_update

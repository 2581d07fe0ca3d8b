"""FedML `ServerAggregator` plugin: FedAvg on trainable tensors, evaluation by the method."""
from __future__ import annotations

from typing import Any

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core import ServerAggregator

from fedml_fes.runtime.job import Job
from fedml_fes.runtime.server import FedAvgCore


class FesServerAggregator(ServerAggregator):
    def __init__(self, job: Job, args: Any):
        super().__init__(job.model, args)
        self.core = FedAvgCore(job)

    def get_model_params(self):
        return self.core.get_model_params()

    def set_model_params(self, model_parameters) -> None:
        self.core.set_model_params(model_parameters)

    def aggregate(self, raw_client_model_or_grad_list, senders=None, on_reject=None, reference=None):
        # FedML's default averages whole state dicts by sample count; ours is the same rule
        # on the trainable tensors, in client-id order and float64 (reproducible bitwise),
        # after the core's screen (invalid or out-of-line updates are rejected and logged).
        return self.core.aggregate(raw_client_model_or_grad_list, senders=senders, on_reject=on_reject,
                                   reference=reference)

    @property
    def last_rejected(self) -> list[tuple[int, str]]:
        """The last `aggregate` call's rejections: (index in its list, reason)."""
        return self.core.last_rejected

    def test(self, test_data, device, args) -> dict[str, float]:
        return self.core.test(test_data, device, args)

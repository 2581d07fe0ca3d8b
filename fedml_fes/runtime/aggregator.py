"""The server's aggregator: FedAvg over the trainable tensors, the update screen, evaluation.

`FedAvgCore` is what FedML's `ServerAggregator` plugin (`plugins/adapters/aggregator.py`) and
every runtime of ours delegate to; `AggregatorLike` is the part of FedML's interface the round
logic (`runtime.server.RoundServer`) calls.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Protocol

import torch

from ..data.readers import LabeledTexts
from ..tuning.params import fedavg, load_trainable, screen_updates, trainable_state
from ..tuning.split import ActivationCache
from .job import Job

log = logging.getLogger(__name__)


class AggregatorLike(Protocol):
    """The part of FedML's `ServerAggregator` interface the round logic uses."""

    def get_model_params(self) -> "OrderedDict[str, torch.Tensor]": ...

    def set_model_params(self, params: "OrderedDict[str, torch.Tensor]") -> None: ...

    def on_before_aggregation(self, raw: list) -> tuple[list, list[int]]: ...

    def aggregate(
        self,
        raw: list,
        senders: list[str] | None = None,
        on_reject: Callable[[str], None] | None = None,
        reference: "OrderedDict[str, torch.Tensor] | None" = None,
    ) -> "OrderedDict[str, torch.Tensor]": ...

    def on_after_aggregation(self, params: "OrderedDict[str, torch.Tensor]") -> "OrderedDict[str, torch.Tensor]": ...

    def test(self, test_data: LabeledTexts, device: torch.device, args: Any) -> dict[str, float]: ...


class FedAvgCore:
    """FedAvg on trainable tensors plus evaluation; FedML's aggregator plugin delegates here.

    `aggregate` screens every update itself, whoever calls it (`tuning.params.screen_updates`:
    tensor names, shapes, dtypes, finite values, a positive weight, and the absolute and
    train_args.robust_norm_factor bounds on its change from the current global model). A
    rejected update is logged with its sender and never averaged; when every one is rejected
    the global model comes back unchanged. `last_rejected` holds the last call's
    (index in raw, reason) pairs."""

    def __init__(self, job: Job, norm_factor: float | None = None):
        self.job = job
        self.norm_factor = job.cfg.train.robust_norm_factor if norm_factor is None else norm_factor
        self.last_rejected: list[tuple[int, str]] = []

    def get_model_params(self):
        return trainable_state(self.job.model)

    def set_model_params(self, params):
        load_trainable(self.job.model, params)

    def on_before_aggregation(self, raw):
        return raw, list(range(len(raw)))

    def _live_params(self) -> "OrderedDict[str, torch.Tensor]":
        """The model's trainable tensors as they are (no copy)."""
        return OrderedDict((n, p.detach()) for n, p in self.job.model.named_parameters() if p.requires_grad)

    def aggregate(
        self, raw, senders: list[str] | None = None, on_reject: Callable[[str], None] | None = None, reference=None
    ):
        """FedAvg of the entries of `raw` ((weight, tensors) pairs) that pass the screen.
        `senders` names them (FedML's hook passes none: 'entry <i>'); each rejection's reason
        goes to `on_reject` (the round server: events.log), else to this module's log.
        `reference`: the current global tensors the changes are measured from (the round
        server passes the global it sent; the in-process trainer shares this model, so after
        training it holds the last client's tensors); default: the model's own."""
        reference = self._live_params() if reference is None else reference
        kept, self.last_rejected = screen_updates(raw, reference, senders, self.norm_factor)
        for _i, reason in self.last_rejected:
            if on_reject is not None:
                on_reject(reason)
            else:
                log.warning("rejected %s", reason)
        if not kept:  # nothing to average: the global as it was
            return OrderedDict((k, v.detach().to("cpu", copy=True)) for k, v in reference.items())
        return fedavg([raw[i] for i in kept])

    def on_after_aggregation(self, params):
        return params

    def test(self, test_data, device, args):
        """Evaluate; a frozen bottom's outputs are cached server-side across rounds."""
        j = self.job
        split = getattr(j.model, "split", None)
        if split is None:
            return j.method.evaluate(j.model, j.tokenizer, test_data, j.cfg, device)
        if not hasattr(self, "_eval_cache"):
            self._eval_cache = ActivationCache()
        previous, split.cache = split.cache, self._eval_cache
        try:
            return j.method.evaluate(j.model, j.tokenizer, test_data, j.cfg, device)
        finally:
            split.cache = previous

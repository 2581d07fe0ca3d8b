"""Client side of a round: load the global tensors, train locally, return an update."""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from typing import Iterator

import torch

from ..cost.meter import TaskMeter
from ..cost.proxy import EMBEDDINGS_FILE, proxy_embedding_flops
from ..data.federated import ClientData
from ..pseudo.store import PseudoLabels
from ..tuning.params import load_trainable, trainable_state
from ..tuning.split import ActivationCache
from .job import Job
from .tasks import ClientTask, ClientUpdate


class LocalTrainer:
    """Plays any client: which one is decided by the task, never by the process."""

    def __init__(self, job: Job):
        self.job = job

    def get_params(self) -> "OrderedDict[str, torch.Tensor]":
        return trainable_state(self.job.model)

    def set_params(self, params: "OrderedDict[str, torch.Tensor]") -> None:
        load = getattr(self.job.method, "load_global", None)  # adapter views: tensors may come sliced
        if load is not None:
            load(self.job.model, params)
        else:
            load_trainable(self.job.model, params)

    def run(self, task: ClientTask, client: ClientData) -> ClientUpdate:
        job = self.job
        if client.client_id != task.client_id:
            raise ValueError(f"task for client {task.client_id} got data of client {client.client_id}")
        # what the task computes and holds, for the cost emulation (reads shapes, changes nothing)
        with TaskMeter(job.model, job.device, job.cfg.cost.measure_memory) as meter:
            update = self._run(task, client)
        update.metrics.update(meter.metrics())
        return update

    def _run(self, task: ClientTask, client: ClientData) -> ClientUpdate:
        job = self.job
        torch.manual_seed(task.seed)  # dropout
        gen = torch.Generator().manual_seed(task.seed)  # batch order and masks
        start = time.perf_counter()
        if task.kind == "label":
            return self._label(task, client, start)
        if task.kind == "prototypes":  # the `agree` labeler's second view: this gold client's class sums
            params = job.method.gold_class_sums(client)
            flops = proxy_embedding_flops(job.cfg.filter.proxy_model, client.gold_texts, job.cfg.model.max_seq_length)
            metrics = {"compute_s": time.perf_counter() - start, "cost_filter_flops": flops}
            return ClientUpdate(task.round_idx, task.client_id, params, 0.0, metrics)
        trial = "trial" in task.options  # a pacing trial trains on the trial's labels only
        pseudo = job.store.load_pseudo(client.client_id, trial) if job.method.uses_pseudo else None
        # a method whose configuration varies per task (AutoFedNLP's adapter views) trains
        # under the task's and sends only that part of its tensors
        scope = getattr(job.method, "task_scope", lambda _m, _o: contextlib.nullcontext())
        with self._activation_cache(client.client_id) as cache_stats, scope(job.model, task.options):
            weight, metrics = job.method.local_train(
                job.model,
                job.tokenizer,
                client,
                job.cfg.for_round(
                    task.round_idx,
                    job.method.uses_pseudo,
                    getattr(job.method, "bias_only", False),
                    getattr(job.method, "every_layer", False),
                ),
                gen,
                job.device,
                pseudo,
            )
        metrics.update(cache_stats)
        metrics["compute_s"] = time.perf_counter() - start
        params = self.get_params()
        pack = getattr(job.method, "pack_update", None)
        return ClientUpdate(
            task.round_idx, task.client_id, pack(params, task.options) if pack else params, weight, metrics
        )

    @contextlib.contextmanager
    def _activation_cache(self, client_id: int) -> Iterator[dict[str, float]]:
        """Load the client's frozen-bottom cache from its folder for this task, save it after."""
        split = getattr(self.job.model, "split", None)
        stats: dict[str, float] = {}
        if split is None or not self.job.cfg.tuning.activation_cache:
            yield stats
            return
        path = self.job.store.client_dir(client_id) / "activations.pt"
        split.cache = ActivationCache.load(path)
        try:
            yield stats
            split.cache.save(path)
            stats.update(
                cache_hits=float(split.cache.hits),
                cache_misses=float(split.cache.misses),
                cache_bytes=float(sum(t.numel() * t.element_size() for t in split.cache.store.values())),
            )
        finally:
            split.cache = None

    def _label(self, task: ClientTask, client: ClientData, start: float) -> ClientUpdate:
        """Inference runtime: relabel the pool with the global model, keep the confident part."""
        job = self.job
        trial = "trial" in task.options
        previous: PseudoLabels = job.store.load_pseudo(client.client_id, trial)
        embedded = (job.store.client_dir(client.client_id) / EMBEDDINGS_FILE).is_file()
        with self._activation_cache(client.client_id) as cache_stats:
            labels, inferred = job.method.label(
                job.model, client, job.cfg, job.device, previous, job.store.client_dir(client.client_id), task.options
            )
        job.store.save_pseudo(client.client_id, labels, trial)
        metrics = {
            "pseudo_count": float(len(labels)),
            "inferred": float(inferred),
            "pool": float(len(client.unlabeled)),
            "compute_s": time.perf_counter() - start,
            **cache_stats,
        }
        if not embedded and (job.store.client_dir(client.client_id) / EMBEDDINGS_FILE).is_file():
            # the filtering proxy embedded the pool in this pass: on-device compute too
            metrics["cost_filter_flops"] = proxy_embedding_flops(
                job.cfg.filter.proxy_model, client.unlabeled.texts, job.cfg.model.max_seq_length
            )
        report = {"example_ids": labels.example_ids, "labels": labels.labels}
        return ClientUpdate(task.round_idx, task.client_id, OrderedDict(), 0.0, metrics, report)

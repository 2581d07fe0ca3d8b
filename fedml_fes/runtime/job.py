"""Everything a process needs to play its role, built deterministically from the config.

Every process (the in-process runtime, each mpirun rank, each cross-silo client) builds the
same partition and the same initial model from the same config and seed, so no data has
to travel; only the round's tasks and the trainable tensors do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..config import FesConfig
from ..data.federated import FederatedData, LabelOracle, build_federated_data, hold_out_validation
from ..models import load_tokenizer
from ..pseudo.store import ClientStore
from .methods import Method, decides_on_validation, get_method


@dataclass
class Job:
    cfg: FesConfig
    data: FederatedData
    method: Method
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel
    device: torch.device
    oracle: LabelOracle | None  # evaluator side only; None in client processes
    store: ClientStore  # per-client state (pseudo labels), one folder per client id


def select_device(cfg: FesConfig) -> torch.device:
    if cfg.device_args.using_gpu and torch.cuda.is_available():
        return torch.device(f"cuda:{cfg.device_args.gpu_id}")
    return torch.device("cpu")


def configure_torch(cfg: FesConfig) -> None:
    """Thread count is part of bitwise reproducibility across runtimes: set it explicitly."""
    if cfg.common.torch_threads > 0:
        torch.set_num_threads(cfg.common.torch_threads)


def build_job(cfg: FesConfig, role: str, run_dir: str | Path) -> Job:
    """role: 'server' keeps the label oracle; 'client' drops it; 'both' (in-process) keeps it."""
    configure_torch(cfg)
    data, oracle = federated_data_for(cfg)
    method = get_method(cfg.train.method)
    tokenizer = load_tokenizer(cfg.model.model)
    device = select_device(cfg)
    model = method.build_model(cfg, data.classes, tokenizer).to(device)
    if cfg.train.gradient_checkpointing:
        from ..prompt.classifier import checkpointable

        checkpointable(model)  # refused now, not after the initial evaluation
    return Job(
        cfg,
        data,
        method,
        tokenizer,
        model,
        device,
        oracle if role != "client" else None,
        ClientStore(Path(run_dir) / "clients"),
    )


def federated_data_for(cfg: FesConfig) -> tuple[FederatedData, LabelOracle]:
    """The partition this run trains on: for a method that decides on validation accuracy,
    pacing_args.val_holdout of the gold labels moved out of training into `data.validation`
    (the same in every process: seeded)."""
    data, oracle = build_federated_data(cfg)
    return with_validation(data, cfg), oracle


def with_validation(data: FederatedData, cfg: FesConfig) -> FederatedData:
    """`data` with the validation hold-out moved out of training where the run's method decides
    on it (seeded: the same in every process)."""
    if decides_on_validation(get_method(cfg.train.method), cfg):
        return hold_out_validation(data, cfg.pacing.val_holdout, cfg.common.random_seed)
    return data

"""Everything a process needs to play its role, built deterministically from the config.

Every process (the in-process runtime, each mpirun rank, each cross-silo client) builds the
same partition and the same initial model from the same config and seed, so no data has
to travel; only the round's tasks and the trainable tensors do.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
import yaml
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..config import FesConfig
from ..data.federated import FederatedData, LabelOracle, build_federated_data
from ..models import load_tokenizer
from ..pseudo.store import ClientStore
from .methods import Method, get_method


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
    data, oracle = build_federated_data(cfg)
    method = get_method(cfg.train.method)
    tokenizer = load_tokenizer(cfg.model.model)
    device = select_device(cfg)
    model = method.build_model(cfg, data.classes, tokenizer).to(device)
    return Job(cfg, data, method, tokenizer, model, device, oracle if role != "client" else None,
               ClientStore(Path(run_dir) / "clients"))


def check_before_run(cfg: FesConfig) -> None:
    """What can fail without loading a model (the model path, the MLM build's config), checked
    before a run directory is created so bad input leaves nothing behind."""
    from ..models import resolve_model_path
    from ..pretrain.source import mlm_build_config
    resolve_model_path(cfg.model.model)
    mlm_build_config(cfg)


def default_run_name(cfg: FesConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{cfg.train.method}-{cfg.data.dataset}-s{cfg.common.random_seed}-{stamp}-{int(time.time() * 1e3) % 1000:03d}"


def make_run_dir(cfg: FesConfig, run_dir: str | None = None) -> Path:
    """Create the run directory and store the resolved config in it."""
    path = Path(run_dir) if run_dir else Path(cfg.common.output_dir) / (cfg.common.run_name or default_run_name(cfg))
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return path

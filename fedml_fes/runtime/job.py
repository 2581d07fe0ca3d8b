"""Everything a process needs to play its role, built deterministically from the config.

Every process (the in-process runtime, each mpirun rank, each cross-silo client) builds the
same partition and the same initial model from the same config and seed, so no data has
to travel; only the round's tasks and the trainable tensors do.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
import yaml
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..config import FesConfig, resolve_paths
from ..data.federated import FederatedData, LabelOracle, build_federated_data, hold_out_validation
from ..errors import FesError
from ..models import load_tokenizer
from ..pseudo.store import ClientStore
from .methods import Method, decides_on_validation, get_method
from .rundir import lock_run_dir


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


# file stems that say nothing about the data: the run is named after the folder instead
_GENERIC_STEMS = {
    "train",
    "training",
    "trainset",
    "train_set",
    "train_data",
    "data",
    "dataset",
    "datasets",
    "data_files",
    "all",
    "full",
    "input",
    "inputs",
    "raw",
    "examples",
    "labeled",
    "corpus",
    "text",
    "texts",
    "file",
    "files",
    "partition_files",
}
_DATA_SUFFIXES = {".csv", ".tsv", ".jsonl", ".json", ".txt", ".h5", ".hdf5", ".gz", ".bz2", ".xz", ".zip"}


def _sanitize(name: str) -> str:
    """A run-folder-safe name: [A-Za-z0-9_.-] only, no leading dot (hidden) or separator."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-")[:64].rstrip("._-")


def _name_of_file(path: str, drop: str) -> str:
    """The data a file holds, by name: its stem without data suffixes and without `drop`
    (`_train` of reviews_train.csv, `_data` of FedNLP's agnews_data.h5); a generic stem
    (train.csv, data.jsonl) gives its folder's name instead."""
    p = Path(path)
    stem = p.name
    while Path(stem).suffix.lower() in _DATA_SUFFIXES:
        stem = stem[: -len(Path(stem).suffix)]
    stripped = re.sub(drop, "", stem, flags=re.IGNORECASE)
    stem = stripped or stem
    candidates = [stem] + [parent.name for parent in list(p.parents)[:2]]
    for name in candidates:
        clean = _sanitize(name)
        if clean and clean.lower() not in _GENERIC_STEMS:
            return clean
    return ""


def dataset_label(cfg: FesConfig) -> str:
    """What a run's folder calls its data: the built-in dataset's name, or for data the user
    points at (dataset custom, fednlp_h5, hf) the name of that file, folder or HF dataset."""
    d = cfg.data
    name = ""
    if d.dataset == "custom" and d.train_file:
        name = _name_of_file(d.train_file, r"[_.-](train|training)$")
    elif d.dataset == "fednlp_h5" and d.fednlp_data_file:
        name = _name_of_file(d.fednlp_data_file, r"[_.-]data$")
    elif d.dataset == "hf" and d.hf_dataset:
        name = _sanitize("-".join(x for x in (d.hf_dataset.replace("/", "_"), d.hf_config) if x))
    return name or _sanitize(d.dataset) or "data"


def default_run_name(cfg: FesConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (
        f"{cfg.train.method}-{dataset_label(cfg)}-s{cfg.common.random_seed}-{stamp}-{int(time.time() * 1e3) % 1000:03d}"
    )


def make_run_dir(cfg: FesConfig, run_dir: str | None = None, lock: bool = False) -> Path:
    """Create the run directory and store the resolved config in it: input paths absolute (a
    config file's were resolved when it was read; relative ones left, such as defaults, mean the
    current directory), so the stored config names the same files wherever it is read.

    `lock`: hold `<run_dir>/.lock` for the rest of this process (the process that owns the run),
    taken before config.yaml is written: a second run into a live run's directory is refused
    with one line and changes nothing there (`rundir.lock_run_dir`)."""
    path = Path(run_dir) if run_dir else Path(cfg.common.output_dir) / (cfg.common.run_name or default_run_name(cfg))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FesError(f"run directory {path} is a file, not a folder") from None
    except OSError as e:
        raise FesError(f"cannot create run directory {path}: {e.strerror or e}") from None
    if lock:
        lock_run_dir(path)
    try:
        (path / "config.yaml").write_text(yaml.safe_dump(resolve_paths(cfg.to_dict(), Path.cwd()), sort_keys=False))
    except OSError as e:
        raise FesError(f"cannot write in run directory {path}: {e.strerror or e}") from None
    return path

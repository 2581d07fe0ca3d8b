"""Local training and prediction for both model kinds: a classification head or a prompt MLM.

An adapter turns texts into a batch and a batch into class logits; everything else (local
epochs, hard or soft targets, batched prediction) is shared, so FedCLS, Pseudo-only,
Prompt-only and FedFSL differ only in their adapter and data, not in their loops.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Mapping, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from ..errors import FesError
from .model import PromptEncoder
from .words import cut_texts


def encode(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_len: int, texts_b: Sequence[str | None] | None = None
) -> dict[str, torch.Tensor]:
    """Tokenize one batch (pairs when texts_b is given), padded to its longest member. Single
    texts are cut to their first max_len words first where that keeps the tokens (words.py);
    pairs are not: which of the two is longer decides how the tokenizer truncates them."""
    if texts_b is not None and any(texts_b):
        return tokenizer(
            list(texts),
            [b or "" for b in texts_b],
            truncation=True,
            max_length=max_len,
            padding="longest",
            return_tensors="pt",
        )
    return tokenizer(
        cut_texts(tokenizer, texts, max_len),
        truncation=True,
        max_length=max_len,
        padding="longest",
        return_tensors="pt",
    )


class Adapter(Protocol):
    def batch(self, texts_a: Sequence[str], texts_b: Sequence[str | None] | None) -> dict[str, torch.Tensor]: ...

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


class HeadAdapter:
    """AutoModelForSequenceClassification: [CLS] text [SEP] -> head logits."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_len: int):
        self.tok, self.max_len = tokenizer, max_len

    def batch(self, texts_a, texts_b):
        return dict(encode(self.tok, texts_a, self.max_len, texts_b))

    def logits(self, model, batch):
        return model(**batch).logits


class PromptAdapter:
    """PromptMLM: pattern with one mask -> verbalizer logits at the mask."""

    def __init__(self, encoder: PromptEncoder):
        self.encoder = encoder

    def batch(self, texts_a, texts_b):
        return self.encoder.batch(texts_a, texts_b)

    def logits(self, model, batch):
        return model(**batch)


STEP_CHUNK_ELEMENTS = 1 << 20  # a larger tensor steps in row blocks of about this many weights


class StepInBackward:
    """AdamW, stepped per parameter as soon as the backward pass has accumulated its gradient,
    which is freed right after: the whole model's gradients (0.54 GB for SmolLM2 under full
    tuning) never exist at once, and none is left on the model after training. A fresh
    optimizer per call, as FedAvg clients keep no optimizer state across rounds. On the CPU
    torch's AdamW updates one tensor at a time anyway, so the steps equal one grouped AdamW's
    bit for bit (tests/test_step_in_backward.py).

    A tensor of more than `chunk_elements` weights (SmolLM2's 28M-weight embedding) steps in
    blocks of rows, each block a view of it with its own AdamW: AdamW is elementwise, so the
    weights are the same bit for bit, while its temporaries (the denominator: two tensors of
    the parameter's size, 226 MB for that embedding) shrink to a block's.

    `own_lr` gives some parameters a learning rate of their own (a class head beside bias-only
    layers steps at the full-tuning rate, the biases at the far larger bias rate)."""

    def __init__(
        self,
        params: Sequence[nn.Parameter],
        lr: float,
        weight_decay: float,
        fused: bool = False,
        chunk_elements: int = STEP_CHUNK_ELEMENTS,
        own_lr: Mapping[nn.Parameter, float] | None = None,
    ):
        def adamw(ps: list[torch.Tensor], rate: float) -> torch.optim.Optimizer:
            return torch.optim.AdamW(ps, lr=rate, weight_decay=weight_decay, fused=fused or None)

        self._hooks = []
        for p in params:
            rate = (own_lr or {}).get(p, lr)
            row = p[0].numel() if p.dim() else 0
            if p.numel() <= chunk_elements or not row or not p.is_contiguous():
                self._hooks.append(p.register_post_accumulate_grad_hook(_stepper(adamw([p], rate))))
                continue
            rows = max(1, chunk_elements // row)
            blocks = [nn.Parameter(p.detach()[a : a + rows]) for a in range(0, len(p), rows)]  # views
            self._hooks.append(p.register_post_accumulate_grad_hook(_block_stepper(adamw(blocks, rate), blocks, rows)))

    def close(self) -> None:
        """Detach the hooks, and with them the optimizers and their state (two moments per parameter)."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()


def _stepper(opt: torch.optim.Optimizer) -> Callable[[torch.Tensor], None]:
    def step(_p: torch.Tensor) -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _block_stepper(opt: torch.optim.Optimizer, blocks: list[nn.Parameter], rows: int) -> Callable[[torch.Tensor], None]:
    def step(p: torch.Tensor) -> None:
        for i, block in enumerate(blocks):
            block.grad = p.grad[i * rows : (i + 1) * rows]
        opt.step()
        opt.zero_grad(set_to_none=True)
        p.grad = None

    return step


def train_examples(
    model: nn.Module,
    adapter: Adapter,
    texts_a: Sequence[str],
    texts_b: Sequence[str | None] | None,
    targets: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    generator: torch.Generator,
    device: torch.device,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
    weights: np.ndarray | None = None,
    fused: bool = False,
    checkpointing: bool = False,
    classes: np.ndarray | None = None,
    own_lr: Mapping[nn.Parameter, float] | None = None,
) -> dict[str, float]:
    """Local epochs of cross-entropy against `targets` (N x C probabilities; one-hot = hard),
    each example's loss times its entry in `weights` (N; None: all 1).

    `classes` (C booleans; None: all) restricts the softmax to those classes, FedRS's
    restricted softmax (Li & Zhan, KDD 2021) at alpha 0: the other classes' logits get no
    gradient, so a client that holds no label of a class does not teach the shared model
    to never predict it. The targets' mass on the other classes is dropped, rows renormalized.

    `autocast` (precision.autocast_for) wraps each forward pass and loss; the backward pass
    and the optimizer step run outside it, on float32 weights.

    AdamW steps inside the backward pass (`StepInBackward`; `own_lr`: parameters with a
    learning rate of their own), as torch's fused kernel with `fused`
    (train_args.fused_optimizer). `checkpointing` (train_args.gradient_checkpointing): the
    backbone keeps only each layer's input and recomputes the rest in the backward pass.
    A model with a frozen, cached bottom (`caches_bottom`) gets every example's bottom output
    first, so no training step runs the bottom: same results, and the bottom need not be
    resident while training (cost.memory).
    """
    if getattr(model, "caches_bottom", False):
        for start in range(0, len(texts_a), batch_size):
            b = list(texts_b[start : start + batch_size]) if texts_b is not None else None
            batch = adapter.batch(list(texts_a[start : start + batch_size]), b)
            with autocast():
                model.fill_cache(batch["input_ids"].to(device), batch["attention_mask"].to(device))
    model.train()
    if checkpointing:
        gradient_checkpointing(model, True)
    steps = StepInBackward([p for p in model.parameters() if p.requires_grad], lr, weight_decay, fused, own_lr=own_lr)
    y = torch.as_tensor(targets, dtype=torch.float32)
    absent = None
    if classes is not None:
        keep = torch.as_tensor(classes, dtype=torch.bool)
        y = y * keep
        y = y / y.sum(-1, keepdim=True).clamp_min(1e-12)
        absent = (~keep).to(device)
    w = torch.ones(len(y)) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
    losses: list[float] = []
    for _ in range(epochs):
        order = torch.randperm(len(texts_a), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            b = [texts_b[i] for i in idx] if texts_b is not None else None
            batch = {k: v.to(device) for k, v in adapter.batch([texts_a[i] for i in idx], b).items()}
            with autocast():
                logits = adapter.logits(model, batch).float()
                if absent is not None:
                    logits = logits.masked_fill(absent, float("-inf"))
                logp = torch.log_softmax(logits, dim=-1)
                if absent is not None:
                    logp = logp.masked_fill(absent, 0.0)  # no 0 x -inf in the sum below
                loss = -(w[idx].to(device) * (y[idx].to(device) * logp).sum(-1)).mean()
            loss.backward()  # steps every parameter as its gradient is complete
            losses.append(float(loss.detach()))
    steps.close()
    if checkpointing:
        gradient_checkpointing(model, False)
    return {
        "train_loss": float(np.mean(losses)) if losses else float("nan"),
        "train_examples": float(len(texts_a) * epochs),
    }


def checkpointable(model: nn.Module) -> nn.Module:
    """The model's HF backbone, which train_args.gradient_checkpointing switches; one line if it has none."""
    lm = getattr(model, "backbone", model)
    if not getattr(lm, "supports_gradient_checkpointing", False):
        raise FesError(
            f"train_args.gradient_checkpointing: {type(lm).__name__} does not support gradient checkpointing"
        )
    return lm


def trains_weight_matrices(model: nn.Module) -> bool:
    """Whether a trainable tensor is a matrix (a weight matrix, an embedding, LoRA's factors),
    not only vectors (biases, norm gains, (IA)^3's scalings, which PEFT stores as one-row or
    one-column matrices): what train_args.checkpoint_bias_only tells apart."""
    return any(p.requires_grad and p.dim() >= 2 and p.numel() > max(p.shape) for p in model.parameters())


def gradient_checkpointing(model: nn.Module, on: bool) -> None:
    """Turn HF activation checkpointing of the model's backbone on or off. Recomputing a layer
    repeats its forward ops exactly, so the weights come out the same bit for bit
    (tests/test_causal_lm.py); it trades 13-21% more client training time (measured) for the
    saved activations (SmolLM2, 64 tokens, batch 4: 0.4 GB, docs/BENCHMARK.md)."""
    lm = checkpointable(model)
    if on:
        # nothing here generates, and transformers warns on every checkpointed forward that asks
        # for a KV cache (the head classifier's causal LMs: FedCLS, Pseudo-only)
        if getattr(lm.config, "use_cache", False):
            lm.config.use_cache = False
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.activation_checkpointing_disable()


@torch.no_grad()
def predict_proba(
    model: nn.Module,
    adapter: Adapter,
    texts_a: Sequence[str],
    texts_b: Sequence[str | None] | None,
    *,
    batch_size: int,
    device: torch.device,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
) -> np.ndarray:
    """Class probabilities (N x C); texts sorted by length so padding stays small."""
    model.eval()
    order = np.argsort([len(t) for t in texts_a], kind="stable")
    out: np.ndarray | None = None
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        b = [texts_b[i] for i in idx] if texts_b is not None else None
        batch = {k: v.to(device) for k, v in adapter.batch([texts_a[i] for i in idx], b).items()}
        with autocast():
            logits = adapter.logits(model, batch)
        probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        if out is None:
            out = np.empty((len(texts_a), probs.shape[1]), dtype=np.float32)
        out[idx] = probs
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def class_balanced_weights(labels: Sequence[int]) -> np.ndarray:
    """Per-example weights n / (classes present x count of its class): every class present
    carries the same total weight, and the weights still average 1."""
    y = np.asarray(labels, dtype=np.int64)
    if not len(y):
        return np.ones(0, dtype=np.float32)
    classes, counts = np.unique(y, return_counts=True)
    per_class = len(y) / (len(classes) * counts)
    return per_class[np.searchsorted(classes, y)].astype(np.float32)


def present_classes(targets: np.ndarray) -> np.ndarray:
    """The classes (C booleans) that some row of `targets` (N x C) puts first: a client's
    own label set, hard labels or soft ones alike."""
    out = np.zeros(targets.shape[1], dtype=bool)
    out[np.asarray(targets).argmax(1)] = True
    return out


def one_hot(labels: Sequence[int], num_classes: int) -> np.ndarray:
    out = np.zeros((len(labels), num_classes), dtype=np.float32)
    out[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)] = 1.0
    return out

"""What a split-learning client trains on and how the server scores the merged model.

`mlm`: the client's own text cut into sentences (FedBERT pre-training), BERT's 80/10/10
masking, length-grouped batches (`pretrain/mlm.py`'s helpers). `classification`: the
client's labeled texts: its few gold labels (`labels: gold`, the project's few-shot setting)
or every training text with its label (`labels: all`, FedBERT's supervised fine-tuning).
Batches are drawn from a per-(round, client) generator on the client, so both runtimes draw
the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from ..data.federated import ClientData, LabelOracle
from ..pretrain.mlm import (
    _special_mask,
    length_grouped_batch,
    length_order,
    mask_tokens,
    pad_batch,
    sentence_chunks,
    tokenize_texts,
)
from ..prompt.classifier import encode
from .parts import ClientPart, ServerBody

EVAL_MASK_SEED = 1234  # the fixed evaluation masks, as pretrain.mlm.masked_token_accuracy


@dataclass
class Shard:
    """One client's training examples, tokenized once."""

    client_id: int
    token_ids: list[list[int]]
    labels: list[int] | None = None  # classification only

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, W), masked for MLM
    attention_mask: torch.Tensor  # (B, W)
    targets: torch.Tensor | None  # MLM: (B, W) bool positions to predict
    labels: torch.Tensor  # MLM: original ids at the targets; classification: class ids


def _pair_ids(
    tokenizer: PreTrainedTokenizerBase, a: Sequence[str], b: Sequence[str] | None, max_len: int
) -> list[list[int]]:
    if b is None:
        return tokenize_texts(tokenizer, a, max_len)
    return list(tokenizer(list(a), list(b), truncation=True, max_length=max_len)["input_ids"])


def make_shard(
    task: str,
    client: ClientData,
    oracle: LabelOracle | None,
    tokenizer: PreTrainedTokenizerBase,
    max_len: int,
    labels: str = "gold",
) -> Shard:
    if task == "mlm":
        return Shard(client.client_id, tokenize_texts(tokenizer, sentence_chunks(client.all_texts()), max_len))
    texts, texts_b, ys = list(client.gold_texts), list(client.gold_texts_b or ()) or None, list(client.gold_labels)
    if labels == "all" and len(client.unlabeled):
        if oracle is None:
            raise ValueError("split_args.labels all needs the label oracle")
        texts += list(client.unlabeled.texts)
        if texts_b is not None:
            texts_b += list(client.unlabeled.texts_b or ())
        ys += oracle.labels_of(list(client.unlabeled.example_ids))
    return Shard(client.client_id, _pair_ids(tokenizer, texts, texts_b, max_len) if texts else [], ys)


class BatchSampler:
    """Batches of one client for one round, from the client's (round, client) generator."""

    def __init__(
        self,
        task: str,
        shard: Shard,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int,
        mask_prob: float,
        generator: torch.Generator,
    ):
        self.task, self.shard, self.tok, self.bs, self.prob, self.gen = (
            task,
            shard,
            tokenizer,
            batch_size,
            mask_prob,
            generator,
        )
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        if task == "mlm":
            lengths = np.fromiter((len(x) for x in shard.token_ids), dtype=np.int64, count=len(shard))
            self.order = length_order(lengths, generator)

    def next(self) -> Batch:
        n = len(self.shard)
        if self.task == "mlm":
            idx = length_grouped_batch(self.order, self.bs, self.gen)
            batch = pad_batch([self.shard.token_ids[i] for i in idx], self.pad_id)
            masked, targets = mask_tokens(
                batch["input_ids"], _special_mask(batch, self.tok), self.tok, self.prob, self.gen
            )
            return Batch(masked, batch["attention_mask"], targets, batch["input_ids"][targets])
        idx = (
            torch.randperm(n, generator=self.gen)[: self.bs]
            if n >= self.bs
            else torch.randint(n, (self.bs,), generator=self.gen)
        ).tolist()
        batch = pad_batch([self.shard.token_ids[i] for i in idx], self.pad_id)
        return Batch(
            batch["input_ids"],
            batch["attention_mask"],
            None,
            torch.tensor([self.shard.labels[i] for i in idx], dtype=torch.long),
        )


def eval_texts(task: str, texts: Sequence[str], heldout: int) -> list[str]:
    """The test texts scored: MLM on the first `heldout` test sentences, classification on all."""
    return sentence_chunks(texts)[:heldout] if task == "mlm" else list(texts)


@torch.no_grad()
def evaluate(
    client: ClientPart,
    body: ServerBody,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    labels: Sequence[int] | None,
    *,
    batch_size: int,
    max_len: int,
    mask_prob: float,
    device: torch.device,
    texts_b: Sequence[str] | None = None,
) -> dict[str, float]:
    """Accuracy and mean loss of the split model (client part + body, no wire) on test texts.

    MLM: masked-token accuracy with fixed masks (every chosen position replaced by the mask
    token, seed EVAL_MASK_SEED), as `pretrain.mlm.masked_token_accuracy` scores a whole model.
    """
    was = client.training, body.training
    client.eval()
    body.eval()
    gen = torch.Generator().manual_seed(EVAL_MASK_SEED)
    hits = total = 0
    loss_sum = 0.0
    try:
        for start in range(0, len(texts), batch_size):
            chunk_b = texts_b[start : start + batch_size] if texts_b is not None else None
            batch = encode(tokenizer, texts[start : start + batch_size], max_len, chunk_b)
            ids, mask = batch["input_ids"], batch["attention_mask"]
            if client.task == "mlm":
                targets = (torch.rand(ids.shape, generator=gen) < mask_prob) & ~_special_mask(batch, tokenizer)
                if not targets.any():
                    continue
                gold = ids[targets]
                ids = ids.clone()
                ids[targets] = tokenizer.mask_token_id
            else:
                targets = None
                gold = torch.as_tensor(list(labels[start : start + batch_size]), dtype=torch.long)
            ids, mask = ids.to(device), mask.to(device)
            needed = client.needed(ids, targets.to(device) if targets is not None else None)
            logits = client.head(body(client.bottom(ids, mask), mask)[needed])
            gold = gold.to(device)
            loss_sum += float(nn.functional.cross_entropy(logits, gold, reduction="sum"))
            hits += int((logits.argmax(-1) == gold).sum())
            total += len(gold)
    finally:
        client.train(was[0])
        body.train(was[1])
    if not total:
        return {"accuracy": float("nan"), "eval_loss": float("nan")}
    return {"accuracy": hits / total, "eval_loss": loss_sum / total}

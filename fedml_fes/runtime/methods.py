"""Federated methods: what a client trains locally, on which clients, and how it is scored.

A method is a small object the round logic calls; adding one (FedFSL, FeS, ...) does not
touch the transports. Registered by the name used in `train_args.method`.
"""
from __future__ import annotations

from typing import Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..config import FesConfig
from ..data.federated import ClientData, FederatedData
from ..data.readers import LabeledTexts
from ..errors import FesError
from ..models import build_classifier, build_masked_lm
from ..pretrain.cache import load_cached_info, save_mlm
from ..pretrain.mlm import masked_token_accuracy, sentence_chunks, train_mlm
from ..prompt.classifier import predict_classifier, train_classifier


class Method(Protocol):
    name: str
    task_kind: str
    primary_metric: str

    def build_model(self, cfg: FesConfig, classes: tuple[str, ...]) -> PreTrainedModel: ...

    def eligible_clients(self, data: FederatedData) -> list[int]: ...

    def local_train(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, client: ClientData,
                    cfg: FesConfig, generator: torch.Generator,
                    device: torch.device) -> tuple[float, dict[str, float]]: ...

    def evaluate(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, test: LabeledTexts,
                 cfg: FesConfig, device: torch.device) -> dict[str, float]: ...

    def cached_result(self, cfg: FesConfig) -> dict | None:
        """A finished earlier run of the same build, if the method caches one."""

    def save_result(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: FesConfig,
                    summary: dict) -> dict:
        """Keep what later runs reuse; returns fields to add to the summary."""


class FedCls:
    """FedCLS baseline: encoder + classification head, FedAvg on gold labels only."""

    name = "fedcls"
    task_kind = "classify"
    primary_metric = "test_acc"

    def build_model(self, cfg: FesConfig, classes: tuple[str, ...]) -> PreTrainedModel:
        return build_classifier(cfg.model.model, len(classes), cfg.common.random_seed)

    def eligible_clients(self, data: FederatedData) -> list[int]:
        ids = data.gold_clients()
        if not ids:
            raise FesError("fedcls trains on gold labels, but no client holds one (data_args.gold_labels=0)")
        return ids

    def local_train(self, model, tokenizer, client, cfg, generator, device):
        t = cfg.train
        metrics = train_classifier(model, tokenizer, client.gold_texts, client.gold_labels, epochs=t.epochs,
                                   batch_size=t.batch_size, lr=t.learning_rate, weight_decay=t.weight_decay,
                                   max_len=cfg.model.max_seq_length, generator=generator, device=device)
        return float(client.num_gold), metrics

    def evaluate(self, model, tokenizer, test, cfg, device):
        preds = predict_classifier(model, tokenizer, test.texts, batch_size=cfg.train.eval_batch_size,
                                   max_len=cfg.model.max_seq_length, device=device)
        return {"test_acc": float((preds == test.labels).mean())}

    def cached_result(self, cfg):
        return None

    def save_result(self, model, tokenizer, cfg, summary):
        return {}


class FedBertMlm:
    """FedBERT-style MLM pre-training on every client's own text (no labels used)."""

    name = "fedbert_mlm"
    task_kind = "mlm"
    primary_metric = "masked_token_acc"

    def build_model(self, cfg: FesConfig, classes: tuple[str, ...]) -> PreTrainedModel:
        return build_masked_lm(cfg.model.model, cfg.common.random_seed)

    def eligible_clients(self, data: FederatedData) -> list[int]:
        return [c.client_id for c in data.clients if sentence_chunks(c.all_texts())]

    def local_train(self, model, tokenizer, client, cfg, generator, device):
        texts = sentence_chunks(client.all_texts())
        metrics = train_mlm(model, tokenizer, texts, steps=cfg.mlm.local_steps, batch_size=cfg.train.batch_size,
                            lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay,
                            max_len=cfg.model.max_seq_length, prob=cfg.mlm.mask_probability,
                            generator=generator, device=device)
        return float(len(texts)), metrics

    def evaluate(self, model, tokenizer, test, cfg, device):
        texts = sentence_chunks(test.texts)[: cfg.mlm.heldout_texts]
        acc = masked_token_accuracy(model, tokenizer, texts, batch_size=cfg.train.eval_batch_size,
                                    max_len=cfg.model.max_seq_length, prob=cfg.mlm.mask_probability,
                                    seed=1234, device=device)
        return {"masked_token_acc": acc}

    def cached_result(self, cfg):
        return load_cached_info(cfg)

    def save_result(self, model, tokenizer, cfg, summary):
        info = {"masked_token_acc": summary.get("final"), "rounds": summary.get("rounds_completed"),
                "base_model": cfg.model.model}
        return {"mlm_path": str(save_mlm(model, tokenizer, cfg, info))}


METHOD_REGISTRY: dict[str, type] = {"fedcls": FedCls, "fedbert_mlm": FedBertMlm}


def get_method(name: str) -> Method:
    try:
        return METHOD_REGISTRY[name]()
    except KeyError:
        raise FesError(f"unknown method '{name}' (known: {', '.join(METHOD_REGISTRY)})") from None

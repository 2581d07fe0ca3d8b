"""Federated methods: what a client trains or labels locally, and how the result is scored.

One few-shot method covers the baselines and ablations of the paper's Table 1 through three
switches (model kind, pseudo labeling, tuning mode); `fedbert_mlm` builds an MLM head.
Adding a method does not touch the transports. Registered by `train_args.method`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from ..config import FesConfig
from ..data.federated import ClientData, FederatedData
from ..data.readers import LabeledTexts
from ..errors import FesError
from ..models import build_classifier, build_masked_lm
from ..pretrain.cache import load_cached_info, save_mlm
from ..pretrain.mlm import masked_token_accuracy, sentence_chunks, train_mlm
from ..pretrain.source import resolve_mlm_path
from ..prompt.classifier import HeadAdapter, PromptAdapter, one_hot, predict_proba, train_examples
from ..prompt.model import PromptEncoder, PromptMLM
from ..prompt.pvp import PVP, get_pvp, verbalizer_token_ids
from ..pseudo.filtering import ProxyEmbedder, cached_order
from ..pseudo.labeler import select_pseudo
from ..pseudo.pacing import per_pass_count
from ..pseudo.store import PseudoLabels
from ..tuning.plan import LayerPlan, apply_tuning, num_layers
from ..tuning.split import FrozenBottom


class Method(Protocol):
    name: str
    primary_metric: str
    uses_pseudo: bool
    train_kind: str

    def build_model(self, cfg: FesConfig, classes: tuple[str, ...], tokenizer: PreTrainedTokenizerBase) -> nn.Module: ...

    def eligible_clients(self, data: FederatedData) -> list[int]: ...

    def local_train(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, client: ClientData, cfg: FesConfig,
                    generator: torch.Generator, device: torch.device,
                    pseudo: PseudoLabels | None) -> tuple[float, dict[str, float]]: ...

    def label(self, model: nn.Module, client: ClientData, cfg: FesConfig, device: torch.device,
              previous: PseudoLabels, store_dir: Path, options: dict) -> tuple[PseudoLabels, int]: ...

    def evaluate(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, test: LabeledTexts, cfg: FesConfig,
                 device: torch.device) -> dict[str, float]: ...

    def cached_result(self, cfg: FesConfig) -> dict | None: ...

    def save_result(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, cfg: FesConfig, summary: dict) -> dict: ...


def _texts_b(obj) -> tuple | None:
    """Second text of pair datasets (NLI), when the data carries one."""
    tb = getattr(obj, "texts_b", None)
    return tb if tb is not None and any(tb) else None


def pvp_for(cfg: FesConfig) -> tuple[str, dict[str, str]]:
    """(pattern, verbalizer) from the YAML's own pair or the registry."""
    p = cfg.prompt
    if p.pattern:
        return p.pattern, dict(p.verbalizer)
    pvp: PVP = get_pvp(p.pvp or cfg.data.dataset)
    return pvp.pattern(p.pattern_id), pvp.verbalizer(p.pattern_id)


@dataclass
class FewShot:
    """Head or prompt model, with or without pseudo labels, full / bias-only / planned tuning.

    `filtering` and `pacing` say where those come from: "config" reads filter_args /
    pacing_args (FeS), anything else fixes them (the baselines: no filter, FedFSL's static
    count per pass from pseudo_args).
    """

    name: str
    prompt: bool
    uses_pseudo: bool
    tuning: str | None = None  # None: model_args.tuning decides
    filtering: str = "none"  # none | random | vote_k | config
    pacing: str = "count"  # count (pseudo_args.per_pass) | static | adaptive | config
    primary_metric: str = "test_acc"
    train_kind: str = "train"

    def check_data(self, cfg: FesConfig, data: FederatedData) -> None:
        """Settings that only make sense against the partition, checked before any round."""
        if self.uses_pseudo and self.filter_method(cfg) == "vote_k":
            largest = max(len(c.unlabeled) for c in data.clients)
            if cfg.filter.knn >= largest:
                raise FesError(f"filter_args.knn={cfg.filter.knn} is larger than every client's unlabeled pool "
                               f"(largest: {largest}); pick k below it")

    def filter_method(self, cfg: FesConfig) -> str:
        return cfg.filter.method if self.filtering == "config" else self.filtering

    def pacing_mode(self, cfg: FesConfig) -> str:
        return cfg.pacing.mode if self.pacing == "config" else self.pacing

    def build_model(self, cfg, classes, tokenizer):
        max_len = cfg.model.max_seq_length
        if self.prompt:
            pattern, verbalizer = pvp_for(cfg)
            ids = verbalizer_token_ids(tokenizer, verbalizer, classes)
            self.adapter = PromptAdapter(PromptEncoder(tokenizer, pattern, max_len))
            model: nn.Module = PromptMLM(build_masked_lm(resolve_mlm_path(cfg), cfg.common.random_seed), ids)
        else:
            self.adapter = HeadAdapter(tokenizer, max_len)
            model = build_classifier(cfg.model.model, len(classes), cfg.common.random_seed)
        self.num_classes = len(classes)
        mode = self.tuning or cfg.model.tuning
        plan = LayerPlan(num_layers(model), cfg.tuning.full_layers, cfg.tuning.bias_layers) if mode == "plan" else None
        apply_tuning(model, mode, plan)
        if isinstance(model, PromptMLM):
            model.freeze_vocab_bias()
            model.class_bias.requires_grad_(cfg.prompt.train_class_bias)
            if plan is not None and plan.frozen_bottom:
                model.split = FrozenBottom(model.mlm.base_model, plan.frozen_bottom)
        self.plan = plan
        self._embedder = ProxyEmbedder(cfg.filter.proxy_model)
        return model

    def eligible_clients(self, data):
        ids = data.gold_clients()
        if not ids:
            raise FesError(f"{self.name} starts from gold labels, but no client holds one (data_args.gold_labels=0)")
        return ids

    def local_train(self, model, tokenizer, client, cfg, generator, device, pseudo):
        texts_a = list(client.gold_texts)
        gold_b = getattr(client, "gold_texts_b", None)
        pool_b = _texts_b(client.unlabeled)
        texts_b = list(gold_b) if gold_b is not None else [None] * len(texts_a)
        targets = [one_hot(client.gold_labels, self.num_classes)]
        if pseudo is not None and len(pseudo):
            where = {e: i for i, e in enumerate(client.unlabeled.example_ids)}
            rows = [where[e] for e in pseudo.example_ids]
            texts_a += [client.unlabeled.texts[i] for i in rows]
            texts_b += [pool_b[i] if pool_b else None for i in rows]
            soft = cfg.pseudo.soft_labels and pseudo.probs
            targets.append(np.asarray(pseudo.probs, dtype=np.float32) if soft
                           else one_hot(pseudo.labels, self.num_classes))
        t = cfg.train
        metrics = train_examples(model, self.adapter, texts_a, texts_b if any(texts_b) else None,
                                 np.concatenate(targets), epochs=t.epochs, batch_size=t.batch_size,
                                 lr=t.learning_rate, weight_decay=t.weight_decay, generator=generator, device=device)
        metrics["pseudo_used"] = float(len(pseudo) if pseudo is not None else 0)
        return float(len(texts_a)), metrics

    def label(self, model, client, cfg, device, previous, store_dir, options):
        """Relabel with the global model; returns (pseudo labels, number of samples inferred).

        Without filtering the whole pool is inferred and the most confident are kept; with a
        filter only the ranking's prefix is inferred: the target size times
        `filter_args.oversample`, of which the most confident target are kept.
        """
        pool = client.unlabeled
        if not len(pool):
            return previous, 0
        p = cfg.pseudo
        added = per_pass_count(len(pool), float(options["k"])) if "k" in options else p.per_pass
        target = min(len(previous) + added, len(pool))
        method = self.filter_method(cfg)
        if method == "none":
            candidates = np.arange(len(pool))
        else:
            seed = int(np.random.SeedSequence([cfg.common.random_seed, client.client_id, 3]).generate_state(1)[0])
            order = cached_order(store_dir, pool.texts, method, self._embedder, cfg.filter.knn, cfg.filter.rho, seed)
            candidates = np.sort(order[:min(len(pool), math.ceil(target * cfg.filter.oversample))])
        texts_b = _texts_b(pool)
        probs = predict_proba(model, self.adapter, [pool.texts[i] for i in candidates],
                              [texts_b[i] for i in candidates] if texts_b else None,
                              batch_size=cfg.train.eval_batch_size, device=device)
        keep = select_pseudo(probs, target, p.confidence_threshold, p.class_balance, list(client.gold_labels))
        labels = PseudoLabels(example_ids=[int(pool.example_ids[candidates[i]]) for i in keep],
                              labels=[int(probs[i].argmax()) for i in keep],
                              probs=[[round(float(x), 6) for x in probs[i]] for i in keep] if p.soft_labels else [],
                              passes=previous.passes + 1)
        return labels, len(candidates)

    def evaluate(self, model, tokenizer, test, cfg, device):
        probs = predict_proba(model, self.adapter, test.texts, _texts_b(test), batch_size=cfg.train.eval_batch_size,
                              device=device)
        pred = probs.argmax(1)
        per_class = [float((pred[test.labels == c] == c).mean()) if (test.labels == c).any() else float("nan")
                     for c in range(self.num_classes)]
        return {"test_acc": float((pred == test.labels).mean()), "per_class_acc": per_class}

    def cached_result(self, cfg):
        return None

    def save_result(self, model, tokenizer, cfg, summary):
        return {}


class FedBertMlm:
    """FedBERT-style MLM pre-training on every client's own text (no labels used)."""

    name = "fedbert_mlm"
    primary_metric = "masked_token_acc"
    uses_pseudo = False
    train_kind = "mlm"

    def build_model(self, cfg, classes, tokenizer):
        return build_masked_lm(cfg.model.model, cfg.common.random_seed)

    def eligible_clients(self, data):
        return [c.client_id for c in data.clients if sentence_chunks(c.all_texts())]

    def local_train(self, model, tokenizer, client, cfg, generator, device, pseudo):
        texts = sentence_chunks(client.all_texts())
        metrics = train_mlm(model, tokenizer, texts, steps=cfg.mlm.local_steps, batch_size=cfg.train.batch_size,
                            lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay,
                            max_len=cfg.model.max_seq_length, prob=cfg.mlm.mask_probability,
                            generator=generator, device=device)
        return float(len(texts)), metrics

    def label(self, model, client, cfg, device, previous, store_dir, options):
        raise FesError("fedbert_mlm does not pseudo-label")

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


PRESETS = {
    "fedcls": lambda: FewShot("fedcls", prompt=False, uses_pseudo=False),
    "pseudo_only": lambda: FewShot("pseudo_only", prompt=False, uses_pseudo=True),
    "prompt_only": lambda: FewShot("prompt_only", prompt=True, uses_pseudo=False),
    "fedfsl": lambda: FewShot("fedfsl", prompt=True, uses_pseudo=True),
    "fedfsl_bias": lambda: FewShot("fedfsl_bias", prompt=True, uses_pseudo=True, tuning="bias"),
    # FeS: prompt + pseudo labels + co-planning + filtering + curriculum pacing, and ablations
    "fes": lambda: FewShot("fes", prompt=True, uses_pseudo=True, tuning="plan", filtering="config", pacing="config"),
    "fes_no_cp": lambda: FewShot("fes_no_cp", prompt=True, uses_pseudo=True, tuning="full", filtering="config",
                                 pacing="config"),
    "fes_no_rf": lambda: FewShot("fes_no_rf", prompt=True, uses_pseudo=True, tuning="plan", filtering="none",
                                 pacing="config"),
    "fes_no_dc": lambda: FewShot("fes_no_dc", prompt=True, uses_pseudo=True, tuning="plan", filtering="config",
                                 pacing="static"),
    "fedbert_mlm": FedBertMlm,
}


def get_method(name: str) -> Method:
    try:
        return PRESETS[name]()
    except KeyError:
        raise FesError(f"unknown method '{name}' (known: {', '.join(PRESETS)})") from None

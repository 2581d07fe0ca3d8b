"""Federated methods: what a client trains or labels locally, and how the result is scored.

One few-shot method covers the baselines and ablations of the paper's Table 1 through three
switches (model kind, pseudo labeling, tuning mode); `fedbert_mlm` builds an MLM head.
Adding a method does not touch the transports. Registered by `train_args.method`.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
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
from ..models import build_classifier, build_prompt_lm, is_causal_lm, skeleton
from ..precision import autocast_for
from ..pretrain.source import resolve_mlm_path
from ..prompt.classifier import (
    HeadAdapter,
    PromptAdapter,
    class_balanced_weights,
    one_hot,
    predict_proba,
    present_classes,
    train_examples,
    trains_weight_matrices,
)
from ..prompt.model import PromptCausalLM, PromptEncoder, PromptMLM
from ..prompt.pvp import PVP, get_pvp, verbalizer_token_ids
from ..pseudo.augment import drop_words
from ..pseudo.filtering import ProxyEmbedder, cached_order, pool_embeddings
from ..pseudo.labeler import CONTENT_FREE, correct_bias, flexible_thresholds, select_classwise, select_pseudo
from ..pseudo.pacing import budget_target
from ..pseudo.prototypes import agreeing, class_sums
from ..pseudo.store import PseudoLabels
from ..report.class_shift import class_report
from ..tuning.adapters import (
    adapter_plan,
    add_adapters,
    add_ia3,
    add_lora_beside,
    capacity_plan,
    is_adapter_param,
    is_ia3_param,
)
from ..tuning.autoconfig import (
    AdapterView,
    ProgressiveConfigurator,
    applied_view,
    load_view,
    set_lora_scaling,
    slice_update,
)
from ..tuning.plan import add_zero_biases, apply_tuning, num_layers, plan_for
from ..tuning.split import FrozenBottom
from .fedbert import FedBertMlm


class Method(Protocol):
    name: str
    primary_metric: str
    uses_pseudo: bool
    train_kind: str

    def build_model(
        self, cfg: FesConfig, classes: tuple[str, ...], tokenizer: PreTrainedTokenizerBase, weights: bool = True
    ) -> nn.Module: ...

    def eligible_clients(self, data: FederatedData) -> list[int]: ...

    def local_train(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        client: ClientData,
        cfg: FesConfig,
        generator: torch.Generator,
        device: torch.device,
        pseudo: PseudoLabels | None,
    ) -> tuple[float, dict[str, float]]: ...

    def label(
        self,
        model: nn.Module,
        client: ClientData,
        cfg: FesConfig,
        device: torch.device,
        previous: PseudoLabels,
        store_dir: Path,
        options: dict,
    ) -> tuple[PseudoLabels, int]: ...

    def evaluate(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        test: LabeledTexts,
        cfg: FesConfig,
        device: torch.device,
    ) -> dict[str, float]: ...

    def cached_result(self, cfg: FesConfig) -> dict | None: ...

    def save_result(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, cfg: FesConfig, summary: dict
    ) -> dict: ...


def _texts_b(obj) -> tuple | None:
    """Second text of pair datasets (NLI), when the data carries one."""
    tb = getattr(obj, "texts_b", None)
    return tb if tb is not None and any(tb) else None


# The reference code infers a fixed fraction of each labeling client's pool (the candidates):
# 10% for AG News and Yahoo, 20% for MNLI, 50% for Yelp-F. Other datasets: 10%.
CANDIDATE_FRACTIONS = {"agnews": 0.1, "yahoo_answers": 0.1, "mnli": 0.2, "yelp_review_full": 0.5}


def candidate_fraction(cfg: FesConfig) -> float:
    return cfg.filter.candidate_fraction or CANDIDATE_FRACTIONS.get(cfg.data.dataset, 0.1)


def pvp_for(cfg: FesConfig, causal: bool = False) -> tuple[str, dict[str, str]]:
    """(pattern, verbalizer) from the YAML's own pair or the registry (its causal-LM forms for
    a causal backbone)."""
    p = cfg.prompt
    if p.pattern:
        return p.pattern, dict(p.verbalizer)
    pvp: PVP = get_pvp(p.pvp or cfg.data.dataset)
    return pvp.pattern(p.pattern_id, causal), pvp.verbalizer(p.pattern_id, causal)


def build_prompt_model(
    cfg: FesConfig, classes: tuple[str, ...], tokenizer: PreTrainedTokenizerBase, weights: bool
) -> tuple[PromptMLM, PromptAdapter]:
    """The prompt model on the configured backbone (masked or causal LM) and its input adapter."""
    causal = is_causal_lm(cfg.model.model)
    adapter, ids = prompt_view(cfg, tokenizer, classes, *pvp_for(cfg, causal), causal)
    if not weights:
        lm = skeleton(cfg.model.model, masked_lm=True)
    else:
        lm = build_prompt_lm(cfg.model.model if causal else resolve_mlm_path(cfg), cfg.common.random_seed)
    return (PromptCausalLM(lm, ids) if causal else PromptMLM(lm, ids)), adapter


def ensemble_views(
    cfg: FesConfig, classes: tuple[str, ...], tokenizer: PreTrainedTokenizerBase
) -> list[tuple[PromptAdapter, list[int]]]:
    """PET's labeling ensemble: every built-in pattern of the run's kind (causal or masked) for
    its dataset, each with its own verbalizer ids. One error line when there is nothing to
    average: your own pattern (prompt_args.pattern), or a dataset with one pattern."""
    if cfg.prompt.pattern:
        raise FesError(
            "pseudo_args.labeler ensemble averages the dataset's built-in patterns; prompt_args.pattern "
            "sets your own: use another labeler, or the built-in pattern set (prompt_args.pvp)"
        )
    causal = is_causal_lm(cfg.model.model)
    name = cfg.prompt.pvp or cfg.data.dataset
    pvp: PVP = get_pvp(name)
    count = len(pvp.causal_patterns if causal else pvp.patterns)
    if count < 2:
        raise FesError(f"pseudo_args.labeler ensemble needs two or more patterns; '{name}' has {count}")
    return [
        prompt_view(cfg, tokenizer, classes, pvp.pattern(i, causal), pvp.verbalizer(i, causal), causal)
        for i in range(count)
    ]


def prompt_view(
    cfg: FesConfig,
    tokenizer: PreTrainedTokenizerBase,
    classes: tuple[str, ...],
    pattern: str,
    verbalizer: dict,
    causal: bool,
) -> tuple[PromptAdapter, list[int]]:
    """One pattern's input adapter and its verbalizer words' token ids."""
    encoder = PromptEncoder(tokenizer, pattern, cfg.model.max_seq_length, causal=causal)
    return PromptAdapter(encoder), verbalizer_token_ids(tokenizer, verbalizer, classes)


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
    # (adapter, verbalizer ids) per pattern when pseudo_args.labeler is ensemble (build_model)
    views: list[tuple[PromptAdapter, list[int]]] = field(default_factory=list, repr=False)
    lora_beside: bool = False  # LoRA beside the plan's biases (tuning_args.lora_rank; build_model)
    ia3: bool = False  # (IA)^3 instead of the plan's biases (tuning_args.capacity; build_model)

    def filter_method(self, cfg: FesConfig) -> str:
        return cfg.filter.method if self.filtering == "config" else self.filtering

    def pacing_mode(self, cfg: FesConfig) -> str:
        return cfg.pacing.mode if self.pacing == "config" else self.pacing

    def build_model(self, cfg, classes, tokenizer, weights: bool = True):
        """The model with its trainable set chosen; weights=False: the same on the meta device
        (shapes only, nothing read: a dry run's checks and payload size)."""
        max_len = cfg.model.max_seq_length
        mode = self.tuning or cfg.model.tuning
        if self.prompt:
            model, self.adapter = build_prompt_model(cfg, classes, tokenizer, weights)
        else:
            self.adapter = HeadAdapter(tokenizer, max_len)
            model = (
                build_classifier(cfg.model.model, len(classes), cfg.common.random_seed)
                if weights
                else skeleton(cfg.model.model, masked_lm=False, num_labels=len(classes))
            )
        self.num_classes = len(classes)
        self.views = []
        if self.uses_pseudo and cfg.pseudo.labeler == "ensemble":
            if not self.prompt:
                raise FesError(
                    f"pseudo_args.labeler ensemble averages prompt patterns; {self.name} labels with a "
                    f"head classifier: use another labeler"
                )
            self.views = ensemble_views(cfg, classes, tokenizer)
        plan = plan_for(num_layers(model), cfg.tuning.full_layers, cfg.tuning.bias_layers) if mode == "plan" else None
        # a class head trains beside the biases (a head: HEAD_PREFIXES), at the full-tuning rate
        # its rows train at in Prompt-only: at the bias rate (0.01) one AdamW step can move a
        # class's logit by up to about 7 on SmolLM2 (the hidden state's L1 norm at the slot is ~740)
        self.head_lr = cfg.train.learning_rate
        if self.prompt and cfg.tuning.verbalizer_head and mode in ("bias", "plan"):
            model.add_class_head()
        sites = cfg.tuning.bias_sites
        capacity = cfg.tuning.capacity if plan is not None and plan.bias_layers else "bias"
        if capacity == "ia3":  # (IA)^3 vectors in the plan's bias-only layers, their biases frozen
            add_ia3(model.backbone if self.prompt else model, range(plan.frozen_bottom, plan.total - plan.full_layers))
        else:  # BitFit on bias-free layers (Llama, Gemma): zero biases, the same function
            add_zero_biases(model, mode, plan, sites)
        apply_tuning(model, mode, plan, norm_gains=cfg.tuning.norm_gains, bias_sites=sites, capacity=capacity)
        self.ia3 = capacity == "ia3"
        self.lora_beside = bool(self.prompt and plan is not None and plan.bias_layers and cfg.tuning.lora_rank)
        if self.lora_beside:
            bias_layers = range(plan.frozen_bottom, plan.total - plan.full_layers)
            add_lora_beside(model.backbone, bias_layers, cfg.tuning.lora_rank, cfg.common.random_seed)
        if isinstance(model, PromptMLM):
            model.freeze_vocab_bias()
            model.class_bias.requires_grad_(cfg.prompt.train_class_bias)
            if weights and plan is not None and plan.frozen_bottom:
                model.split = FrozenBottom(model.backbone.base_model, plan.frozen_bottom)
        self.plan = plan
        self.bias_only = mode == "bias" or (plan is not None and plan.full_layers == 0)
        self.every_layer = mode == "bias"  # BitFit over the whole model (fedfsl_bias)
        if weights:
            self._embedder = ProxyEmbedder(cfg.filter.proxy_model, max_len=max_len)
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
        t = cfg.train
        gold_w = class_balanced_weights(client.gold_labels) if t.balance_gold_classes else None
        if pseudo is not None and len(pseudo):
            where = {e: i for i, e in enumerate(client.unlabeled.example_ids)}
            rows = [where[e] for e in pseudo.example_ids]
            texts_a += drop_words([client.unlabeled.texts[i] for i in rows], cfg.pseudo.augment_word_dropout, generator)
            texts_b += [pool_b[i] if pool_b else None for i in rows]
            soft = cfg.pseudo.soft_labels and pseudo.probs
            targets.append(
                np.asarray(pseudo.probs, dtype=np.float32) if soft else one_hot(pseudo.labels, self.num_classes)
            )
        y = np.concatenate(targets)
        n_gold, n_pseudo = len(client.gold_labels), len(y) - len(client.gold_labels)
        lam = cfg.pseudo.sample_weight
        pseudo_w = class_balanced_weights(pseudo.labels) if n_pseudo and cfg.pseudo.balance_classes else None
        if n_pseudo and lam != 1.0:
            pseudo_w = lam * (np.ones(n_pseudo, np.float32) if pseudo_w is None else pseudo_w)
        weights = (
            None
            if gold_w is None and pseudo_w is None
            else np.concatenate(
                [
                    np.ones(n_gold, np.float32) if gold_w is None else gold_w,
                    np.ones(n_pseudo, np.float32) if pseudo_w is None else pseudo_w,
                ]
            )
        )
        metrics = train_examples(
            model,
            self.adapter,
            texts_a,
            texts_b if any(texts_b) else None,
            y,
            epochs=t.epochs,
            batch_size=t.batch_size,
            lr=t.learning_rate,
            weight_decay=t.weight_decay,
            generator=generator,
            device=device,
            autocast=autocast_for(cfg.common.precision, device),
            weights=weights,
            fused=t.fused_optimizer,
            checkpointing=t.gradient_checkpointing and (t.checkpoint_bias_only or trains_weight_matrices(model)),
            classes=present_classes(y) if t.restricted_softmax else None,
            own_lr=self._own_rates(model, cfg),
        )
        metrics["pseudo_used"] = float(len(pseudo) if pseudo is not None else 0)
        return float(n_gold + lam * n_pseudo), metrics  # FedAvg's sample count

    def _own_rates(self, model, cfg) -> dict | None:
        """Parameters that step at a rate of their own: a class head at the full-tuning rate,
        LoRA beside the biases (tuning_args.lora_rank) at tuning_args.lora_learning_rate, (IA)^3
        vectors (tuning_args.capacity) at tuning_args.ia3_learning_rate."""
        rates = {}
        if self.lora_beside:
            rates = {p: cfg.tuning.lora_learning_rate for n, p in model.named_parameters() if is_adapter_param(n)}
        if self.ia3:
            rates |= {p: cfg.tuning.ia3_learning_rate for n, p in model.named_parameters() if is_ia3_param(n)}
        if getattr(model, "class_head", None) is not None:
            rates[model.class_head] = self.head_lr
        return rates or None

    def label(self, model, client, cfg, device, previous, store_dir, options):
        """Relabel with the global model; returns (pseudo labels, number of samples inferred).

        The event's budget is `options["fraction"]` of the pool under curriculum pacing (the
        global event count times k%), else FedFSL's constant `pseudo_args.per_pass`. Without a
        filter the whole pool is inferred; with one, the top of the filter's ranking is: a
        `candidate_fraction` of the pool (never less than the budget). Either way the most
        confident predictions, up to the budget, are kept.
        """
        pool = client.unlabeled
        if not len(pool):
            return previous, 0
        p = cfg.pseudo
        if "fraction" in options:
            target = budget_target(len(pool), float(options["fraction"]))
        elif p.per_pass_fraction > 0:
            target = budget_target(len(pool), p.per_pass_fraction)
        else:
            target = min(p.per_pass, len(pool))
        method = self.filter_method(cfg)
        if method == "none":
            candidates = np.arange(len(pool))
        else:
            seed = int(np.random.SeedSequence([cfg.common.random_seed, client.client_id, 3]).generate_state(1)[0])
            order = cached_order(
                store_dir,
                pool.texts,
                method,
                self._embedder,
                cfg.filter.knn,
                cfg.filter.rho,
                seed,
                cfg.filter.knn_pool_share,
            )
            size = max(target, math.ceil(round(len(pool) * candidate_fraction(cfg), 9)))
            candidates = np.sort(order[: min(len(pool), size)])
        texts_b = _texts_b(pool)
        infer = functools.partial(
            predict_proba,
            model,
            batch_size=cfg.train.eval_batch_size,
            device=device,
            autocast=autocast_for(cfg.common.precision, device),
        )
        chosen_a = [pool.texts[i] for i in candidates]
        chosen_b = [texts_b[i] for i in candidates] if texts_b else None
        if self.views:  # PET's ensemble: the mean over the patterns, one inference each
            probs = np.mean([self._infer_view(model, view, infer, chosen_a, chosen_b) for view in self.views], axis=0)
            inferred = len(candidates) * len(self.views)
        else:
            probs = infer(self.adapter, chosen_a, chosen_b)
            inferred = len(candidates)
        reference = None
        if p.labeler == "contextual":  # the model's answer to no content: its label bias
            reference = infer(self.adapter, list(CONTENT_FREE), [""] * len(CONTENT_FREE) if texts_b else None).mean(
                axis=0
            )
            inferred += len(CONTENT_FREE)
        probs = correct_bias(probs, p.labeler, reference)
        if p.labeler == "classwise":  # a pick may be a class the model ranks second: hard targets
            keep, picked = select_classwise(probs, target, p.confidence_threshold)
            soft = np.eye(probs.shape[1])[picked]
        else:
            thresholds = flexible_thresholds(probs) if p.labeler == "flexmatch" else None
            # agree: only where the gold labels' nearest prototype gives the same class (co-training)
            able = np.arange(len(probs))
            if p.labeler == "agree" and options.get("prototypes") is not None:
                emb = pool_embeddings(store_dir, pool.texts, self._embedder)[candidates]
                able = np.flatnonzero(agreeing(probs, emb, options["prototypes"]))
            keep = able[
                select_pseudo(
                    probs[able], target, p.confidence_threshold, p.class_balance, list(client.gold_labels), thresholds
                )
            ]
            picked, soft = probs[keep].argmax(axis=1), probs[keep]
        labels = PseudoLabels(
            example_ids=[int(pool.example_ids[candidates[i]]) for i in keep],
            labels=[int(c) for c in picked],
            probs=[[round(float(x), 6) for x in row] for row in soft] if p.soft_labels else [],
            passes=previous.passes + 1,
        )
        return labels, inferred

    def gold_class_sums(self, client: ClientData) -> OrderedDict[str, torch.Tensor]:
        """This gold client's share of the `agree` labeler's prototypes: its gold texts' proxy
        embeddings summed per class (pseudo/prototypes.py)."""
        return class_sums(self._embedder.embed(client.gold_texts), client.gold_labels, self.num_classes)

    @staticmethod
    def _infer_view(model, view, infer, texts_a, texts_b) -> np.ndarray:
        adapter, ids = view
        with model.reading(ids):
            return infer(adapter, texts_a, texts_b)

    def evaluate(self, model, tokenizer, test, cfg, device):
        probs = predict_proba(
            model,
            self.adapter,
            test.texts,
            _texts_b(test),
            batch_size=cfg.train.eval_batch_size,
            device=device,
            autocast=autocast_for(cfg.common.precision, device),
        )
        true = probs[np.arange(len(test.labels)), np.asarray(test.labels, dtype=np.int64)]
        return {
            "test_acc": float((probs.argmax(1) == test.labels).mean()),
            "test_nll": float(-np.log(np.clip(true, 1e-12, 1.0)).mean()),  # AUG-E's likelihood signal
            **class_report(probs.argmax(1), test.labels, self.num_classes),
        }

    def cached_result(self, cfg):
        return None

    def save_result(self, model, tokenizer, cfg, summary):
        return {}


@dataclass
class AdapterTuning(FewShot):
    """AutoFedNLP's adapters (`adapter`) or LoRA (`lora`) on the prompt model, gold labels only.

    The PET prompt and verbalizer as `prompt_only`; the encoder stays frozen except for PEFT
    modules in layers adapter_args.depth..L-1 (`tuning.adapters`), which with the prompt's
    class bias (prompt_args.train_class_bias) are all that trains and travels, at
    adapter_args.learning_rate when set (`FesConfig.for_round`). The layers
    below `depth` always run as a frozen bottom (no autograd, eval mode, as FeS's plan does),
    cached per client when tuning_args.activation_cache is on: same results either way.
    """

    def build_model(self, cfg, classes, tokenizer, weights: bool = True):
        model, self.adapter = build_prompt_model(cfg, classes, tokenizer, weights)
        self.num_classes = len(classes)
        a = cfg.adapter
        plan = adapter_plan(a, self.tuning, num_layers(model))
        self.start_view = None
        if a.configurator == "progressive":  # built at the largest capacity; views select from it
            self.start_view = AdapterView(plan.depth, plan.width)
            plan = capacity_plan(plan, a)
        add_adapters(model.backbone, plan, cfg.common.random_seed)
        if self.start_view is not None:
            set_lora_scaling(model.backbone, a.alpha / self.start_view.width)
        model.freeze_vocab_bias()
        model.class_bias.requires_grad_(cfg.prompt.train_class_bias)
        if weights and plan.frozen_bottom:
            model.split = FrozenBottom(model.backbone.base_model, plan.frozen_bottom)
        self.plan = plan
        self.bias_only = False
        return model

    def configurator(self, cfg) -> ProgressiveConfigurator | None:
        """The server's online configurator (adapter_args.configurator: progressive), else None."""
        if self.start_view is None:
            return None
        a = cfg.adapter
        return ProgressiveConfigurator(
            self.start_view,
            self.plan.depth,
            self.plan.width,
            a.trial_rounds,
            a.trial_share,
            seed=cfg.common.random_seed,
        )

    def task_scope(self, model, options):
        """Train under the task's configuration (a `view` option), else as built."""
        if "view" not in options:
            return contextlib.nullcontext()
        return applied_view(model, AdapterView.from_option(options["view"]))

    def load_global(self, model, params) -> None:
        """Global tensors in, possibly sliced to the round's views (`autoconfig.load_view`)."""
        load_view(model, params)

    def pack_update(self, params, options):
        """What travels back: only the task's view of the adapters (see tuning/autoconfig.py)."""
        return slice_update(params, AdapterView.from_option(options["view"])) if "view" in options else params


PRESETS = {
    "fedcls": lambda: FewShot("fedcls", prompt=False, uses_pseudo=False),
    "pseudo_only": lambda: FewShot("pseudo_only", prompt=False, uses_pseudo=True),
    "prompt_only": lambda: FewShot("prompt_only", prompt=True, uses_pseudo=False),
    "fedfsl": lambda: FewShot("fedfsl", prompt=True, uses_pseudo=True),
    "fedfsl_bias": lambda: FewShot("fedfsl_bias", prompt=True, uses_pseudo=True, tuning="bias"),
    # FeS: prompt + pseudo labels + co-planning + filtering + curriculum pacing, and ablations
    "fes": lambda: FewShot("fes", prompt=True, uses_pseudo=True, tuning="plan", filtering="config", pacing="config"),
    "fes_no_cp": lambda: FewShot(
        "fes_no_cp", prompt=True, uses_pseudo=True, tuning="full", filtering="config", pacing="config"
    ),
    "fes_no_rf": lambda: FewShot(
        "fes_no_rf", prompt=True, uses_pseudo=True, tuning="plan", filtering="none", pacing="config"
    ),
    "fes_no_dc": lambda: FewShot(
        "fes_no_dc", prompt=True, uses_pseudo=True, tuning="plan", filtering="config", pacing="static"
    ),
    "fedbert_mlm": FedBertMlm,
    # AutoFedNLP: PEFT adapters / LoRA above a frozen, cached bottom (adapter_args)
    "adapter": lambda: AdapterTuning("adapter", prompt=True, uses_pseudo=False, tuning="adapter"),
    "lora": lambda: AdapterTuning("lora", prompt=True, uses_pseudo=False, tuning="lora"),
}


def get_method(name: str) -> Method:
    try:
        return PRESETS[name]()
    except KeyError:
        raise FesError(f"unknown method '{name}' (known: {', '.join(PRESETS)})") from None


def decides_on_validation(method: Method, cfg: FesConfig) -> bool:
    """Whether the server picks configurations by validation accuracy: FeS's adaptive pacing
    (AUG-E) and AutoFedNLP's progressive configurator. Those runs hold
    pacing_args.val_holdout of the gold labels out of training (`hold_out_validation`)."""
    adaptive = (
        getattr(method, "uses_pseudo", False) and getattr(method, "pacing_mode", lambda _c: "")(cfg) == "adaptive"
    )
    progressive = isinstance(method, AdapterTuning) and cfg.adapter.configurator == "progressive"
    return adaptive or progressive

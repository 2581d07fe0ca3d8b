"""AutoFedNLP-style adapters and LoRA in the upper layers of an encoder, through HF PEFT.

The PEFT modules go in encoder layers `depth`..L-1 and are the only encoder tensors that
train (and travel); the layers below `depth` and the embeddings are frozen, so their outputs
can come from the activation cache (`tuning.split`). Both methods are PEFT's LoRA modules,
injected in place (`peft.inject_adapter_in_model`): parameter names stay the model's own, so
the prompt model, the frozen-bottom split and the cost meter work unchanged.

- `lora`: LoRA (Hu et al. 2021) on the attention query and value projections, the LoRA
  paper's choice; `width` is the rank r.
- `adapter`: a width-r bottleneck beside each layer's feed-forward output projection, built
  as LoRA on that projection (down: intermediate -> r, up: r -> hidden, up initialised to
  zero so training starts from the pretrained function). PEFT ships no Houlsby/Pfeiffer
  bottleneck adapter, and none of its per-layer methods is one: IA3 and LN tuning have no
  width, VeRA shares frozen random matrices, BOFT/OFT rotate weights, PEANuT's bottleneck
  reads the weight matrix, not the activations. LoRA on the FFN output is the closest: He et
  al. 2022 ("Towards a unified view of PEFT") show LoRA and adapters differ only in where the
  bottleneck sits and whether it has a nonlinearity; here it reads the FFN's own GELU
  features, a parallel adapter at the FFN (their best placement). Hand-written adapter layers
  are deliberately not used: PEFT is the maintained implementation.

`add_lora_beside` puts the same LoRA modules beside FeS's bias-only layers (tuning_args.lora_rank)
without changing what else trains; `add_ia3` puts PEFT's (IA)^3 scalings in them
(tuning_args.capacity: ia3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from ..config import ADAPTER_METHODS, AdapterConfig
from ..errors import FesError

KINDS = ADAPTER_METHODS  # train_args.method names the kind
# module names inside a layer (after `layer.<i>.` / `layers.<i>.`), per kind, for BERT/RoBERTa/
# ELECTRA (MiniLM), DeBERTa, DistilBERT and Llama-style decoders (Llama, Qwen2, Gemma3, SmolLM2);
# which of them exist depends on the family
TARGETS = {
    "lora": (
        "attention.self.query",
        "attention.self.value",
        "attention.self.query_proj",
        "attention.self.value_proj",
        "attention.q_lin",
        "attention.v_lin",
        "self_attn.q_proj",
        "self_attn.v_proj",
    ),
    "adapter": ("output.dense", "ffn.lin2", "mlp.down_proj"),
}
# (IA)^3 (T-Few): the keys, the values and the FFN's output projection, whose *input* it scales
FEEDFORWARD = TARGETS["adapter"]
TARGETS["ia3"] = (
    "attention.self.key",
    "attention.self.value",
    "attention.self.key_proj",
    "attention.self.value_proj",
    "attention.k_lin",
    "attention.v_lin",
    "self_attn.k_proj",
    "self_attn.v_proj",
    *FEEDFORWARD,
)
PER_LAYER = {"lora": 2, "adapter": 1, "ia3": 3}  # modules each adapted layer must have
ADAPTER_PARAM = re.compile(r"\.lora_[AB]\.")  # PEFT's LoRA tensors: <module>.lora_A.<adapter>.weight
IA3_PARAM = re.compile(r"\.ia3_l\.")  # PEFT's (IA)^3 vectors: <module>.ia3_l.<adapter>
_IN_LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.(.+)$")


def default_depth(total: int) -> int:
    """The bottom third frozen, the rest adapted (a 6-layer MiniLM: adapters in layers 2-5;
    RoBERTa-large: 8-23); at least the top layer adapted."""
    return min(total - 1, round(total / 3))


@dataclass(frozen=True)
class AdapterPlan:
    """Where the PEFT modules go and how big they are."""

    kind: str
    total: int  # encoder layers
    depth: int  # first adapted layer = layers frozen below (the activation cache's depth)
    width: int
    alpha: float
    dropout: float

    @property
    def frozen_bottom(self) -> int:
        return self.depth

    def describe(self) -> str:
        where = "FFN output" if self.kind == "adapter" else "attention query/value"
        frozen = f"layers 0-{self.depth - 1} frozen, " if self.depth else ""
        return f"{frozen}{self.kind} (PEFT LoRA on {where}, width {self.width}) in layers {self.depth}-{self.total - 1}"


def adapter_plan(a: AdapterConfig, kind: str, total: int) -> AdapterPlan:
    """adapter_args for a model with `total` encoder layers; a depth beyond the top is one line."""
    if kind not in KINDS:
        raise FesError(f"adapter kind must be one of {', '.join(KINDS)}, got '{kind}'")
    depth = default_depth(total) if a.depth < 0 else a.depth
    if depth >= total:
        raise FesError(
            f"adapter_args.depth is {a.depth}, but the model has {total} encoder layers (0-{total - 1}): "
            f"adapters go in layers depth..{total - 1}, so depth must be at most {total - 1}"
        )
    return AdapterPlan(kind, total, depth, a.width, a.alpha, a.dropout)


def capacity_plan(start: AdapterPlan, a: AdapterConfig) -> AdapterPlan:
    """The largest plan the progressive configurator may grow `start` into: adapters from
    adapter_args.min_depth (-1: the bottom third frozen) at width adapter_args.max_width."""
    deepest = default_depth(start.total) if a.min_depth < 0 else a.min_depth
    if deepest > start.depth:
        raise FesError(
            f"adapter_args.min_depth ({deepest}) lies above the starting depth ({start.depth}): "
            f"the configurator only adds layers below the start"
        )
    return AdapterPlan(start.kind, start.total, deepest, max(a.max_width, start.width), start.alpha, start.dropout)


def target_modules(model: nn.Module, plan: AdapterPlan) -> list[str]:
    """Full names of the linear layers that get a PEFT module, checked layer by layer."""
    return _targets(model, plan.kind, range(plan.depth, plan.total))


def _targets(model: nn.Module, kind: str, layers: range) -> list[str]:
    wanted = TARGETS[kind]
    found: dict[int, list[str]] = {i: [] for i in layers}
    for name, module in model.named_modules():
        m = _IN_LAYER.search(name)
        if m and isinstance(module, nn.Linear) and int(m.group(1)) in found and m.group(2) in wanted:
            found[int(m.group(1))].append(name)
    for i, names in found.items():
        if len(names) != PER_LAYER[kind]:
            raise FesError(
                f"{kind}: layer {i} of {type(model).__name__} has {len(names)} of the "
                f"{PER_LAYER[kind]} modules it adapts ({', '.join(wanted)}): supported are "
                f"BERT/RoBERTa/DeBERTa/DistilBERT-style encoders and Llama-style decoders"
            )
    return [n for i in sorted(found) for n in found[i]]


def is_adapter_param(name: str) -> bool:
    return bool(ADAPTER_PARAM.search(name))


def add_adapters(model: nn.Module, plan: AdapterPlan, seed: int) -> int:
    """Inject the plan's PEFT modules into `model` in place and make them its only trainable
    parameters; returns their count. The modules' random init (LoRA's A) comes from `seed`,
    without touching the global RNG, so every process builds the same initial adapters."""
    count = _inject(model, target_modules(model, plan), plan.width, plan.alpha, plan.dropout, seed)
    for name, p in model.named_parameters():
        p.requires_grad_(is_adapter_param(name))
    return count


def add_lora_beside(model: nn.Module, layers: range, rank: int, seed: int) -> list[nn.Parameter]:
    """LoRA of `rank` (alpha 2 x rank) on the query and value projections of `layers`, added to
    a model whose trainable set is already chosen (FeS's bias-only layers,
    tuning_args.lora_rank): the LoRA tensors train too, nothing else changes. Returns them."""
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    _inject(model, _targets(model, "lora", layers), rank, 2.0 * rank, 0.0, seed)
    added = []
    for name, p in model.named_parameters():
        if is_adapter_param(name):
            p.requires_grad_(True)
            added.append(p)
        else:  # PEFT marks every other tensor frozen: restore the plan's choice
            p.requires_grad_(before[name.replace(".base_layer.", ".")])
    return added


def is_ia3_param(name: str) -> bool:
    return bool(IA3_PARAM.search(name))


def add_ia3(model: nn.Module, layers: range) -> int:
    """PEFT's (IA)^3 vectors on the keys, values and FFN output projection of `layers`
    (tuning_args.capacity: ia3), initialised to 1: the model computes what it did. Which tensors
    train is left to `tuning.plan.apply_tuning`, which runs after this; returns their count."""
    from peft import IA3Config, inject_adapter_in_model

    targets = _targets(model, "ia3", layers)
    feedforward = [t for t in targets if t.endswith(FEEDFORWARD)]
    inject_adapter_in_model(IA3Config(target_modules=targets, feedforward_modules=feedforward), model)
    count = sum(p.numel() for n, p in model.named_parameters() if is_ia3_param(n))
    if count == 0:
        raise FesError(f"(IA)^3: no PEFT tensor was added to {type(model).__name__}")
    return count


def _inject(model: nn.Module, targets: list[str], width: int, alpha: float, dropout: float, seed: int) -> int:
    """PEFT's LoRA modules on `targets`, their init seeded apart from the global RNG; their count."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=width, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(config, model)
    count = sum(p.numel() for n, p in model.named_parameters() if is_adapter_param(n))
    if count == 0:
        raise FesError(f"LoRA: no PEFT tensor was added to {type(model).__name__}")
    return count

"""Which parameters train: all, biases only (BitFit, FedFSL-BIAS), or a per-layer plan.

FeS's depth/capacity co-planning: the top `full_layers` encoder layers train fully, the
`bias_layers` below them train biases only, and everything lower (embeddings included)
is frozen. The trainable set is computed from the model and the plan, never implied; it
decides what travels too (`tuning.params.trainable_state` sends exactly what trains).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import FesError
from .adapters import is_ia3_param

# heads train fully: a classification head, the prompt model's class bias and class head
HEAD_PREFIXES = ("classifier.", "score.", "class_bias", "class_head")
_LAYER = re.compile(r"(?:^|\.)(?:layers?|h)\.(\d+)\.")
# the token and position embeddings below layer 0: BERT `embeddings.`, Llama/Qwen/Gemma
# `embed_tokens`, GPT-2 `wte` / `wpe`, OPT `embed_positions`
_EMBEDDING = re.compile(r"(?:^|\.)(?:embeddings|embed_tokens|embed_positions|wte|wpe)\.")


def layer_index(param_name: str) -> int | None:
    """Layer of a parameter (BERT/RoBERTa `encoder.layer.i`, DistilBERT `transformer.layer.i`,
    Llama/Qwen2/Gemma3 `model.layers.i`, GPT-2 `transformer.h.i`)."""
    m = _LAYER.search(param_name)
    return int(m.group(1)) if m else None


def num_layers(model: nn.Module) -> int:
    found = {layer_index(n) for n, _ in model.named_parameters()} - {None}
    if not found:
        raise FesError(f"{type(model).__name__} has no encoder layers named layer.<i>: cannot plan by depth")
    return max(found) + 1


def plan_for(total: int, full_layers: int, bias_layers: int) -> "LayerPlan":
    """The configured plan; bias_layers -1 keeps the paper's ratio: the top third of the
    encoder bias-only (RoBERTa-large: layers 16-23 of 24; a 6-layer MiniLM: layers 4-5)."""
    if bias_layers < 0:
        bias_layers = max(1, round(total / 3))
    return LayerPlan(total, full_layers, bias_layers)


@dataclass(frozen=True)
class LayerPlan:
    total: int
    full_layers: int
    bias_layers: int

    def __post_init__(self) -> None:
        if self.full_layers + self.bias_layers > self.total:
            raise FesError(
                f"layer plan names layers that do not exist: the model has {self.total} layers, "
                f"the plan asks for {self.full_layers} full + {self.bias_layers} bias-only"
            )
        if self.full_layers + self.bias_layers == 0:
            raise FesError("layer plan trains no layer: set tuning_args.full_layers or bias_layers > 0")

    @property
    def frozen_bottom(self) -> int:
        return self.total - self.full_layers - self.bias_layers

    def mode_of_layer(self, i: int) -> str:
        if i >= self.total - self.full_layers:
            return "full"
        return "bias" if i >= self.frozen_bottom else "frozen"

    def describe(self) -> str:
        t, f = self.total, self.full_layers
        parts = [
            f"layers 0-{self.frozen_bottom - 1} frozen" if self.frozen_bottom else "",
            f"layers {self.frozen_bottom}-{t - f - 1} bias-only" if self.bias_layers else "",
            f"layers {t - f}-{t - 1} full" if f else "",
        ]
        return ", ".join(p for p in parts if p)


def _param_mode(name: str, plan: LayerPlan | None, mode: str) -> str:
    if name.startswith(HEAD_PREFIXES):
        return "full"
    if plan is None:
        return mode
    i = layer_index(name)
    if i is not None:
        return plan.mode_of_layer(i)
    if _EMBEDDING.search(name):
        # below layer 0: frozen unless the plan reaches the bottom
        return "frozen" if plan.frozen_bottom else plan.mode_of_layer(0)
    return "full" if plan.full_layers else "bias"  # MLM head / pooler: above the top layer


def at_site(module_path: str, sites: "tuple[str, ...] | list[str]") -> bool:
    """`module_path` ends with one of `sites` (module names, `gate_proj` or `intermediate.dense`);
    no sites: every module."""
    return not sites or any(module_path == s or module_path.endswith("." + s) for s in sites)


def check_sites(model: nn.Module, sites: "tuple[str, ...] | list[str]") -> None:
    """Each of `sites` names at least one linear map of a layer, else one error line: a
    misspelt site would otherwise train nothing in silence."""
    paths = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and layer_index(n + ".") is not None]
    missing = [s for s in sites if not any(at_site(p, (s,)) for p in paths)]
    if missing:
        example = paths[0].split(".")[-1] if paths else "none"
        raise FesError(
            f"tuning_args.bias_sites {missing} name no linear map of {type(model).__name__}'s layers "
            f"(one of them: '{example}')"
        )


def add_zero_biases(model: nn.Module, mode: str, plan: LayerPlan | None = None, sites: "list[str] | tuple" = ()) -> int:
    """BitFit on layers whose linear maps have no bias (Llama, Qwen2's MLP, Gemma): give each
    such nn.Linear in the layers that train biases only ('bias': every layer; 'plan': the
    plan's bias-only layers), at `sites` only when given, a bias of zeros, so the function is
    unchanged until training moves it. Returns how many were added; models that have biases
    already get none."""
    if mode not in ("bias", "plan") or (mode == "plan" and (plan is None or not plan.bias_layers)):
        return 0
    added = 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or module.bias is not None or not at_site(name, sites):
            continue
        i = layer_index(name + ".")
        if i is None or (mode == "plan" and plan.mode_of_layer(i) != "bias"):
            continue
        w = module.weight
        module.bias = nn.Parameter(torch.zeros(w.shape[0], dtype=w.dtype, device=w.device))
        added += 1
    return added


def norm_gain_names(model: nn.Module) -> frozenset[str]:
    """The weights (gains) of every normalization module: LayerNorm, Llama/Qwen/Gemma RMSNorm,
    T5's LayerNorm. Found by module type, not parameter name, so any architecture's norms count."""
    return frozenset(
        f"{mod_name}.{p_name}" if mod_name else p_name
        for mod_name, module in model.named_modules()
        if isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("RMSNorm", "LayerNorm"))
        for p_name, _ in module.named_parameters(recurse=False)
        if p_name == "weight"
    )


def apply_tuning(
    model: nn.Module,
    mode: str,
    plan: LayerPlan | None = None,
    norm_gains: bool = False,
    bias_sites: "list[str] | tuple" = (),
    capacity: str = "bias",
) -> int:
    """Set requires_grad by mode ('full', 'bias', or 'plan' with `plan`); returns trainable count.
    norm_gains (plan only): the bias-only layers train their normalization gains too, as
    LN-tuning does; on RMSNorm models (no norm bias) they are the analogue of the LayerNorm
    bias that BitFit trains on RoBERTa. bias_sites: where biases train, only the biases of
    those modules (`at_site`); a head trains whatever they name. capacity (plan only): 'ia3',
    the plan's bias-only layers train their (IA)^3 vectors (`adapters.add_ia3`, added before
    this) instead of their biases."""
    if mode not in ("full", "bias", "plan"):
        raise FesError(f"tuning mode must be full, bias or plan, got '{mode}'")
    if mode == "plan" and plan is None:
        raise FesError("tuning mode 'plan' needs a LayerPlan")
    gains = norm_gain_names(model) if norm_gains and mode == "plan" else frozenset()
    if bias_sites and mode in ("bias", "plan"):
        check_sites(model, bias_sites)
    count = 0
    for name, p in model.named_parameters():
        m = _param_mode(name, plan if mode == "plan" else None, mode)
        if capacity == "ia3" and mode == "plan":
            kind = is_ia3_param(name)
        else:
            kind = name.endswith("bias") and at_site(name.rpartition(".")[0], bias_sites)
        train = m == "full" or (m == "bias" and (kind or name in gains))
        p.requires_grad_(train)
        count += p.numel() if train else 0
    if count == 0:
        raise FesError(f"tuning mode '{mode}' leaves no trainable parameter in {type(model).__name__}")
    return count

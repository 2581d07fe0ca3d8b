"""AutoFedNLP's progressive configurator: adapter depth and width chosen online.

AutoFedNLP (FedAdapter) starts training with shallow, narrow adapters and upgrades them
while training runs: each round a few of the sampled clients form trial groups that train a
deeper or a wider configuration from the same global model, beside the main group on the
current one; after `trial_rounds` rounds the server compares what each group's averaged
update gained on validation data per unit of device cost, and upgrades the main
configuration when a trial wins.

How one model carries every configuration: the PEFT modules are built once at the largest
capacity a run may reach (layers `min_depth`..L-1, rank `max_width`), LoRA's B initialised to
zero, so capacity that never trained changes nothing. A configuration is an `AdapterView`
(depth d, width w) over those tensors:
- on the client, `applied_view` freezes the adapters below layer d (autograd then stops at
  layer d: a shallower view really is cheaper) and masks the gradients of ranks >= w;
- the update that travels is `slice_update`: the view's layers and ranks only; the global
  model travels down sliced to the union of the round's views (`load_view` on the client);
- the server `expand_update`s it back over the global tensors before the usual screening
  and FedAvg, so tensors outside a client's view keep their global values.
Upgrading from (d, w) to a deeper or wider view therefore never changes the function the
model computes at that moment: the new capacity starts at B = 0, exactly as LoRA starts.
The LoRA scaling stays alpha / (the starting width) for the whole run, so widening does not
rescale what was learnt.
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np
import torch
from torch import nn

from ..errors import FesError

_LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.")
_LORA = re.compile(r"\.lora_([AB])\.")


@dataclass(frozen=True, order=True)
class AdapterView:
    """One configuration: adapters in layers depth..L-1, rank `width`."""

    depth: int
    width: int

    @property
    def name(self) -> str:
        return f"d{self.depth}w{self.width}"

    def as_option(self) -> list[int]:
        return [self.depth, self.width]

    @staticmethod
    def from_option(value) -> "AdapterView":
        depth, width = (int(v) for v in value)
        return AdapterView(depth, width)


def _lora_part(name: str) -> tuple[int, str] | None:
    """(layer, "A" | "B") of a PEFT LoRA tensor's name, else None (e.g. the class bias)."""
    kind, layer = _LORA.search(name), _LAYER.search(name)
    if kind is None or layer is None:
        return None
    return int(layer.group(1)), kind.group(1)


def slice_update(params: Mapping[str, torch.Tensor], view: AdapterView) -> "OrderedDict[str, torch.Tensor]":
    """What a client under `view` sends: its layers' LoRA tensors cut to `width` ranks, plus
    every trainable tensor that is not a LoRA tensor (the prompt's class bias)."""
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, t in params.items():
        part = _lora_part(name)
        if part is None:
            out[name] = t
        elif part[0] >= view.depth:
            out[name] = (t[: view.width] if part[1] == "A" else t[:, : view.width]).contiguous()
    return out


def expand_update(
    sliced: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor], view: AdapterView, sender: str
) -> "OrderedDict[str, torch.Tensor]":
    """A sliced update laid over the global tensors: the full trainable set again, outside
    the view unchanged. Names or shapes that do not fit the view are one line."""
    expected = slice_update(reference, view)
    if list(sliced) != list(expected):
        missing = sorted(set(expected) - set(sliced))[:2]
        extra = sorted(set(sliced) - set(expected))[:2]
        raise FesError(
            f"update from {sender} does not match configuration {view.name}: "
            f"missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, ref in reference.items():
        if name not in sliced:
            out[name] = ref.detach().to("cpu", copy=True)
            continue
        got = sliced[name]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(expected[name].shape):
            raise FesError(
                f"update from {sender}: tensor '{name}' has shape "
                f"{tuple(getattr(got, 'shape', ()))}, configuration {view.name} sends "
                f"{tuple(expected[name].shape)}"
            )
        full = ref.detach().to("cpu", copy=True)
        part = _lora_part(name)
        if part is None:
            full = got.detach().to(full.dtype).clone()
        elif part[1] == "A":
            full[: view.width] = got
        else:
            full[:, : view.width] = got
        out[name] = full
    return out


def load_view(model: nn.Module, params: Mapping[str, torch.Tensor]) -> None:
    """Load global tensors that may be sliced to a view (what `RoundServer.global_params`
    sends under the configurator): a LoRA tensor fills the leading ranks of its parameter,
    the rest keeps what this process holds. That rest was never trained anywhere: B is zero
    there (ranks and layers outside every view so far, see `ProgressiveConfigurator.union`)."""
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in params.items():
            if name not in own:
                raise FesError(f"payload tensor '{name}' does not exist in the model")
            target, part = own[name], _lora_part(name)
            if tuple(value.shape) == tuple(target.shape):
                target.copy_(value)
            elif (
                part is not None
                and part[1] == "A"
                and value.shape[1:] == target.shape[1:]
                and value.shape[0] <= target.shape[0]
            ):
                target[: value.shape[0]].copy_(value)
            elif (
                part is not None
                and part[1] == "B"
                and value.shape[0] == target.shape[0]
                and value.shape[1] <= target.shape[1]
            ):
                target[:, : value.shape[1]].copy_(value)
            else:
                raise FesError(
                    f"payload tensor '{name}' has shape {tuple(value.shape)}, the model's is {tuple(target.shape)}"
                )


@contextlib.contextmanager
def applied_view(model: nn.Module, view: AdapterView) -> Iterator[None]:
    """Train under `view`: LoRA tensors below `depth` frozen, ranks >= `width` get no gradient.
    Everything is restored on exit, so the model's trainable set (what is loaded and read
    as a whole) never changes."""
    frozen: list[nn.Parameter] = []
    hooks = []
    for name, p in model.named_parameters():
        part = _lora_part(name)
        if part is None or not p.requires_grad:
            continue
        if part[0] < view.depth:
            p.requires_grad_(False)
            frozen.append(p)
        elif view.width < (p.shape[0] if part[1] == "A" else p.shape[1]):
            mask = torch.zeros_like(p)
            if part[1] == "A":
                mask[: view.width] = 1
            else:
                mask[:, : view.width] = 1
            hooks.append(p.register_hook(lambda g, m=mask: g * m))
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)
        for h in hooks:
            h.remove()


def set_lora_scaling(model: nn.Module, scaling: float) -> None:
    """Fix every PEFT LoRA module's output scaling (alpha / starting width) for the run."""
    for m in model.modules():
        s = getattr(m, "scaling", None)
        if isinstance(s, dict) and hasattr(m, "lora_A"):
            for key in s:
                s[key] = scaling


@dataclass
class GroupScore:
    """One configuration's record over a trial period."""

    gain: float = 0.0  # summed validation gain of its group's averaged update, per round
    cost_s: float = 0.0  # summed mean emulated device seconds per client, per round
    rounds: int = 0

    @property
    def per_second(self) -> float:
        return self.gain / self.cost_s if self.cost_s > 0 else float("-inf")


class ProgressiveConfigurator:
    """The server's side of AutoFedNLP's online configuration (see the module docstring).

    Each round `assign` splits the sampled clients: `trial_share` of them (at least one, and
    never all) go to the trial views, one step deeper and twice as wide as the main view
    while the capacity allows, taking turns by round when there are fewer trial clients than
    trials; the rest train the main view (a round of one client trains the main view only).
    `finish_round` records each group's validation gain and cost; after `trial_rounds`
    rounds the trial with the best gain per device second wins if it has a positive gain
    and beats the main view's gain per second. Every decision is returned as a log line.
    """

    def __init__(
        self,
        start: AdapterView,
        min_depth: int,
        max_width: int,
        trial_rounds: int,
        trial_share: float,
        depth_step: int = 1,
        seed: int = 0,
    ):
        if start.depth < min_depth or start.width > max_width:
            raise FesError(
                f"the starting adapter configuration {start.name} lies outside the capacity "
                f"(depth >= {min_depth}, width <= {max_width})"
            )
        self.main = start
        self.min_depth, self.max_width = min_depth, max_width
        self.trial_rounds, self.trial_share, self.depth_step = trial_rounds, trial_share, depth_step
        self.seed = seed
        self.period_start = 0
        self.scores: dict[str, GroupScore] = {}
        self.history: list[dict] = []  # one entry per decision

    def trials(self) -> list[AdapterView]:
        """The main view's neighbours that still fit the capacity: deeper, wider."""
        out = []
        if self.main.depth > self.min_depth:
            out.append(AdapterView(max(self.min_depth, self.main.depth - self.depth_step), self.main.width))
        if self.main.width < self.max_width:
            out.append(AdapterView(self.main.depth, min(self.max_width, 2 * self.main.width)))
        return out

    def union(self) -> AdapterView:
        """The smallest view holding the main view and its trials: what the server sends down.
        Views only grow, so everything outside it has never trained (LoRA's B still zero)."""
        views = [self.main] + self.trials()
        return AdapterView(min(v.depth for v in views), max(v.width for v in views))

    def assign(self, round_idx: int, clients: list[int]) -> dict[int, AdapterView]:
        """Each sampled client's view this round (a seeded split of `clients`)."""
        trials = self.trials()
        n_trial = min(len(clients) - 1, max(1, round(self.trial_share * len(clients)))) if trials else 0
        order = np.random.default_rng([self.seed, round_idx, 5]).permutation(sorted(clients))
        views = {int(c): self.main for c in order[n_trial:]}
        for i, c in enumerate(order[:n_trial]):  # fewer slots than trials: they take turns by round
            views[int(c)] = trials[(i + round_idx) % len(trials)]
        return views

    def finish_round(
        self, round_idx: int, gains: Mapping[AdapterView, float], costs: Mapping[AdapterView, float]
    ) -> tuple[list[str], AdapterView | None]:
        """Record one round's per-view gains and costs; at the end of a trial period decide.
        Returns (log lines, the view upgraded to or None)."""
        for view, gain in gains.items():
            s = self.scores.setdefault(view.name, GroupScore())
            s.gain += gain
            s.cost_s += costs.get(view, 0.0)
            s.rounds += 1
        trials = self.trials()
        if not trials or round_idx + 1 - self.period_start < self.trial_rounds:
            return [], None
        main = self.scores.get(self.main.name, GroupScore())
        parts = [
            f"{v.name} gain {s.gain:+.3f} cost {s.cost_s:.3g}s ({s.per_second:+.2e}/s)"
            for v in [self.main] + trials
            for s in [self.scores.get(v.name)]
            if s is not None
        ]
        tried = [
            (self.scores[v.name].per_second, v)
            for v in trials
            if v.name in self.scores and self.scores[v.name].gain > 0
        ]
        winner = max(tried, key=lambda x: x[0])[1] if tried else None
        upgraded = None
        if winner is not None and self.scores[winner.name].per_second > main.per_second:
            upgraded = winner
        line = f"configurator: rounds {self.period_start}-{round_idx}: main {'; '.join(parts)} -> " + (
            f"upgrade {self.main.name} to {upgraded.name}" if upgraded else f"keep {self.main.name}"
        )
        self.history.append(
            {
                "round": round_idx,
                "main": self.main.name,
                "scores": {k: vars(v) for k, v in self.scores.items()},
                "upgrade": upgraded.name if upgraded else None,
            }
        )
        if upgraded is not None:
            self.main = upgraded
        self.period_start, self.scores = round_idx + 1, {}
        return [line], upgraded

    def state_dict(self) -> dict:
        return {
            "main": self.main.as_option(),
            "period_start": self.period_start,
            "scores": {k: vars(v).copy() for k, v in self.scores.items()},
            "history": list(self.history),
        }

    def load_state_dict(self, state: Mapping) -> None:
        self.main = AdapterView.from_option(state["main"])
        self.period_start = int(state["period_start"])
        self.scores = {k: GroupScore(**v) for k, v in state["scores"].items()}
        self.history = list(state["history"])

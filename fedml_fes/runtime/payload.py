"""What FedML's protocol does not carry, carried inside what it does: the params dict.

FedML's cross-silo runtime moves one `OrderedDict[str, Tensor]` each way per round (server
to every silo, each silo back). FeS needs more: which FeS clients a silo plays this phase
and what it should do (the round's plan), and per client what came back (weight, metrics,
pseudo-label report). Both travel as one extra entry: UTF-8 JSON in a uint8 tensor, under
a key no model has. A silo's answer holds every client it played, tensors prefixed by the
client's position in the answer (`"0/encoder.layer.5.output.dense.bias"`).

Pure torch: the FedML plugin (`fedml_fes_plugins.fedml_plugin`) and its tests use it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from ..errors import FesError
from .tasks import ClientTask, ClientUpdate

PLAN_KEY = "__fes_plan__"
UPDATES_KEY = "__fes_updates__"


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_json(obj: Any) -> torch.Tensor:
    return torch.frombuffer(bytearray(json.dumps(obj, default=_jsonable).encode()), dtype=torch.uint8).clone()


def decode_json(t: torch.Tensor) -> Any:
    return json.loads(bytes(t.to(torch.uint8).cpu().numpy().tobytes()).decode())


def assign_slots(tasks: list[ClientTask], slots: int) -> dict[int, list[ClientTask]]:
    """Round-robin over the silos (0..slots-1), in client-id order: deterministic."""
    plan: dict[int, list[ClientTask]] = {s: [] for s in range(slots)}
    for i, task in enumerate(sorted(tasks, key=lambda t: (t.client_id, json.dumps(t.options, sort_keys=True)))):
        plan[i % slots].append(task)
    return plan


def pack_plan(
    params: "OrderedDict[str, torch.Tensor]", round_idx: int, phase: str, tasks: list[ClientTask], slots: int
) -> "OrderedDict[str, torch.Tensor]":
    """The global tensors (empty when no silo needs them) plus the phase's plan."""
    plan = {
        "round": round_idx,
        "phase": phase,
        "slots": {str(s): [t.to_dict() for t in ts] for s, ts in assign_slots(tasks, slots).items()},
    }
    out = OrderedDict(params)
    out[PLAN_KEY] = encode_json(plan)
    return out


def unpack_plan(
    payload: "OrderedDict[str, torch.Tensor]", slot: int
) -> tuple["OrderedDict[str, torch.Tensor]", list[ClientTask]]:
    """(the global tensors, this silo's tasks); a payload without a plan is an error."""
    if PLAN_KEY not in payload:
        raise FesError(f"the server's message carries no '{PLAN_KEY}': is the server running the FeS aggregator?")
    plan = decode_json(payload[PLAN_KEY])
    params = OrderedDict((k, v) for k, v in payload.items() if k != PLAN_KEY)
    return params, [ClientTask.from_dict(t) for t in plan["slots"].get(str(slot), [])]


def pack_updates(updates: list[ClientUpdate]) -> "OrderedDict[str, torch.Tensor]":
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    meta = []
    for i, u in enumerate(updates):
        meta.append(
            {
                "round": u.round_idx,
                "client": u.client_id,
                "weight": u.weight,
                "metrics": u.metrics,
                "report": u.report,
                "keys": list(u.params),
            }
        )
        for k, v in u.params.items():
            out[f"{i}/{k}"] = v
    out[UPDATES_KEY] = encode_json(meta)
    return out


def pack_error(error: str) -> "OrderedDict[str, torch.Tensor]":
    """A silo that failed answers with its error line instead of updates."""
    return OrderedDict({UPDATES_KEY: encode_json({"error": error})})


def unpack_updates(payload: Any) -> list[ClientUpdate]:
    """A silo's answer back into client updates; a silo's error or anything else that is
    not an answer is one clear error."""
    if not hasattr(payload, "keys") or UPDATES_KEY not in payload:
        raise FesError(f"a silo's answer carries no '{UPDATES_KEY}': is the silo running the FeS trainer?")
    meta = decode_json(payload[UPDATES_KEY])
    if isinstance(meta, dict):
        raise FesError(str(meta.get("error", "a silo answered with an error")))
    updates = []
    for i, m in enumerate(meta):
        params = OrderedDict((k, payload[f"{i}/{k}"]) for k in m["keys"])
        updates.append(ClientUpdate(m["round"], m["client"], params, m["weight"], m["metrics"], m["report"]))
    return updates

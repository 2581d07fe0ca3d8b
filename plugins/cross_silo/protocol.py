"""The messages between the cross-silo server and its silos, and the checks on what comes back.

A silo is a process on an edge machine that plays several emulated devices (client ids);
device c always lives on silo `1 + c % K`, because its state (pseudo labels) is on that
silo's disk. Round protocol:

    silo   -> server  JOIN     rank, process session, job fingerprint, its devices' stored state
    server -> silo    WELCOME  (or an error: another job, refused)
    server -> silo    TASKS    round, phase, the silo's tasks, global trainable tensors
    silo   -> server  UPDATES  the devices' updates (and one line per task that failed)
    server -> silo    FINISH   status of the run

FedML's MQTT_S3 backend sends every message parameter as JSON over MQTT except one,
`Message.MSG_ARG_KEY_MODEL_PARAMS`, which it pickles through S3. So tensors, and whole
updates, travel under that key (PAYLOAD) and everything else is JSON-safe. gRPC pickles the
whole message. Either way tensors travel as numpy arrays (`adapters/wire.py`: 2-4x cheaper
to pickle than torch tensors), turned back into tensors on arrival. Updates come from machines the server does not control: `parse_updates`
turns a payload into `ClientUpdate`s, rejecting anything malformed with a reason, before
RoundServer validates the tensors (keys, shapes, dtypes, finite values).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Mapping

import torch

from fedml_fes.runtime.tasks import ClientTask, ClientUpdate
from fedml_fes_plugins.adapters.offline import import_fedml
from fedml_fes_plugins.adapters.wire import tensors_from_wire, tensors_to_wire

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.message import Message

PAYLOAD = Message.MSG_ARG_KEY_MODEL_PARAMS

UPDATE_FIELDS = ("round_idx", "client_id", "params", "weight", "metrics", "report")

LabelCheck = Callable[[int, list, list], "str | None"]


def update_to_wire(u: ClientUpdate) -> dict[str, Any]:
    """Plain data (numpy arrays inside): pickled as a whole by either transport."""
    return {
        "round_idx": int(u.round_idx),
        "client_id": int(u.client_id),
        "params": tensors_to_wire(u.params),
        "weight": float(u.weight),
        "metrics": {str(k): float(v) for k, v in u.metrics.items()},
        "report": {k: [int(x) for x in v] for k, v in u.report.items()},
    }


def _real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _int_list(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x)


def parse_update(
    item: Any, round_idx: int, tasks: Mapping[int, ClientTask], label_check: LabelCheck | None = None
) -> ClientUpdate:
    """One update from the wire, or ValueError naming what is wrong with it."""
    if not isinstance(item, Mapping) or any(k not in item for k in UPDATE_FIELDS):
        raise ValueError(f"malformed update (needs {', '.join(UPDATE_FIELDS)})")
    cid = item["client_id"]
    if not isinstance(cid, int) or isinstance(cid, bool) or cid not in tasks:
        raise ValueError(f"update for client {cid!r}, which this silo was not asked to play")
    if item["round_idx"] != round_idx:
        raise ValueError(f"update from client {cid} is for round {item['round_idx']!r}, not {round_idx}")
    params = tensors_from_wire(item["params"])
    if not isinstance(params, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in params.items()
    ):
        raise ValueError(f"update from client {cid}: params are not a mapping of names to tensors")
    weight = item["weight"]
    if not _real(weight) or not math.isfinite(weight) or weight < 0:
        raise ValueError(f"update from client {cid} has weight {weight!r}")
    metrics = item["metrics"]
    if not isinstance(metrics, Mapping) or not all(isinstance(k, str) and _real(v) for k, v in metrics.items()):
        raise ValueError(f"update from client {cid}: metrics are not a mapping of names to numbers")
    report = item["report"]
    if not isinstance(report, Mapping) or not all(isinstance(k, str) and _int_list(v) for k, v in report.items()):
        raise ValueError(f"update from client {cid}: report is not a mapping of names to integer lists")
    if tasks[cid].kind == "label":
        ids, labels = list(report.get("example_ids", [])), list(report.get("labels", []))
        problem = (
            "example ids and labels differ in length"
            if len(ids) != len(labels)
            else (label_check(cid, ids, labels) if label_check else None)
        )
        if problem:
            raise ValueError(f"labeling report from client {cid}: {problem}")
    return ClientUpdate(
        round_idx,
        cid,
        OrderedDict(params),
        float(weight),
        {k: float(v) for k, v in metrics.items()},
        {k: list(v) for k, v in report.items()},
    )


def parse_updates(
    payload: Any, round_idx: int, tasks: Mapping[int, ClientTask], label_check: LabelCheck | None = None
) -> tuple[list[ClientUpdate], list[str]]:
    """The acceptable updates of one silo's answer, and one reason per rejected item."""
    if payload is None or payload == "":
        return [], []
    if not isinstance(payload, list):
        return [], [f"payload is a {type(payload).__name__}, not a list of updates"]
    updates: list[ClientUpdate] = []
    problems: list[str] = []
    seen: set[int] = set()
    for item in payload:
        try:
            u = parse_update(item, round_idx, tasks, label_check)
        except ValueError as e:
            problems.append(str(e))
            continue
        if u.client_id in seen:
            problems.append(f"second update for client {u.client_id} ignored")
            continue
        seen.add(u.client_id)
        updates.append(u)
    return updates, problems


def parse_tasks(raw: Any) -> list[ClientTask]:
    """Tasks as the server sent them (JSON over MQTT): a list of ClientTask dicts."""
    if not raw:
        return []
    return [ClientTask.from_dict(dict(t)) for t in raw]


def parse_state(raw: Any) -> dict[int, int]:
    """A silo's stored state as it reported it: client id -> pseudo labels held."""
    out: dict[int, int] = {}
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            try:
                out[int(k)] = int(v)
            except (TypeError, ValueError):
                continue
    return out

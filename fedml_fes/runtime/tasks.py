"""Messages of the round protocol, as plain data that any transport can carry."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np
import torch


def task_seed(run_seed: int, round_idx: int, client_id: int) -> int:
    """Per (round, client) seed: the same wherever (whichever process) the client runs."""
    return int(np.random.SeedSequence([run_seed, round_idx, client_id]).generate_state(1)[0])


@dataclass(frozen=True)
class ClientTask:
    """What the server asks one client to do in one round."""

    round_idx: int
    client_id: int
    kind: str  # "label" (pseudo-labeling pass) | "train" | "mlm" | "prototypes" (a gold client's class sums)
    seed: int
    options: dict = field(default_factory=dict)  # e.g. the pacing's k for a labeling pass

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "ClientTask":
        return ClientTask(**d)


@dataclass
class ClientUpdate:
    """A client's answer: trainable tensors, its FedAvg weight, and what it measured."""

    round_idx: int
    client_id: int
    params: "OrderedDict[str, torch.Tensor]"
    weight: float
    metrics: dict[str, float] = field(default_factory=dict)
    # Emulation telemetry for the evaluator (e.g. which examples got which pseudo label, to
    # score them against the hidden truth); a deployed client would not send it.
    report: dict = field(default_factory=dict)

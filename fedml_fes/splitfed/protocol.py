"""The split-learning protocol: the server's message handler, the client's round, one step.

A client talks to the server only through a `Link`: `exchange(kind, client_id, payload)`
sends bytes and returns the reply's bytes. Kinds, per client per round:

    model_pull   up: a small request           down: the client part (global / handed on)
    activations  up: cut activations, mask      down: the body output rows the head reads
    gradients    up: their gradients            down: the gradients at the cut
    model_push   up: the trained client part    down: an empty acknowledgement

`activations` and `gradients` make one training step; the server counts the length of every
payload it receives and sends (`SplitServer.traffic`), in-process and over MPI alike.

Schedules. `parallel` (SplitFed): every client of a round starts from the same client part
and gets its own copy of the body; at the round's end the server averages the body copies
and the pushed client parts, weighted by the clients' example counts (FedAvg of both).
`sequential` (SplitNN): clients train one after another on the one body; the client part
pushed by one is what the next pulls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch
from torch import nn

from ..errors import FesError
from .parts import ClientPart, PartyRng, ServerBody, load_params, params_of
from .tasks import Batch, BatchSampler, Shard
from .wire import Traffic, pack, unpack

WIRE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
# streams of one (round, client): the client's batches, the client's dropout, the server's dropout
_DATA, _CLIENT_RNG, _SERVER_RNG = 1, 2, 3


def stream_seed(seed: int, round_idx: int, client_id: int, stream: int) -> int:
    """A 63-bit seed for one random stream of one client in one round."""
    return int(
        torch.randint(
            2**62,
            (1,),
            generator=torch.Generator().manual_seed(
                (seed * 1_000_003 + round_idx) * 1_000_033 + client_id * 7 + stream
            ),
        )
    )


class Link(Protocol):
    def exchange(self, kind: str, client_id: int, payload: bytes) -> bytes: ...


@dataclass
class Settings:
    schedule: str
    learning_rate: float
    weight_decay: float
    wire_dtype: str
    seed: int
    local_steps: int = 1
    batch_size: int = 4
    mask_prob: float = 0.15
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


def _optimizer(module: nn.Module, s: Settings) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad], lr=s.learning_rate, weight_decay=s.weight_decay
    )


@dataclass
class _BodySession:
    """The server's side of one client in one round: the body it steps, its optimizer, its stream."""

    body: ServerBody
    opt: torch.optim.Optimizer
    rng: PartyRng
    pending: tuple[torch.Tensor, torch.Tensor] | None = None  # (cut activations, output rows) of a step
    pushed: dict[str, torch.Tensor] | None = None
    examples: float = 0.0


class SplitServer:
    """Holds the body and the global client part; answers clients' messages."""

    def __init__(self, client_part: ClientPart, body: ServerBody, settings: Settings):
        if settings.schedule not in ("parallel", "sequential"):
            raise FesError(f"split_args.schedule must be parallel or sequential, got '{settings.schedule}'")
        self.client_part = client_part.to(settings.device)
        self.body = body.to(settings.device)
        self.s = settings
        self.wire = WIRE_DTYPES[settings.wire_dtype]
        self.traffic = Traffic()
        self.round_idx = -1
        self.sessions: dict[int, _BodySession] = {}
        self._seq_opt = _optimizer(self.body, settings) if settings.schedule == "sequential" else None
        self._pull_cache: bytes | None = None

    def begin_round(self, round_idx: int, clients: list[int]) -> None:
        self.round_idx = round_idx
        self._pull_cache = None
        self.body.train()
        self.sessions = {}
        for c in clients:
            rng = PartyRng(stream_seed(self.s.seed, round_idx, c, _SERVER_RNG))
            if self.s.schedule == "parallel":
                body = copy.deepcopy(self.body)
                self.sessions[c] = _BodySession(body, _optimizer(body, self.s), rng)
            else:
                self.sessions[c] = _BodySession(self.body, self._seq_opt, rng)

    def handle(self, kind: str, client_id: int, payload: bytes) -> bytes:
        """Answer one message; both payloads are counted in `traffic`."""
        self.traffic.add(kind, "up", len(payload))
        session = self.sessions.get(client_id)
        if session is None:
            raise FesError(f"split server: client {client_id} is not in round {self.round_idx}")
        handler = {
            "model_pull": self._pull,
            "activations": self._forward,
            "gradients": self._backward,
            "model_push": self._push,
        }.get(kind)
        if handler is None:
            raise FesError(f"split server: unknown message kind '{kind}'")
        reply = handler(session, payload)
        self.traffic.add(kind, "down", len(reply))
        return reply

    def _pull(self, session: _BodySession, payload: bytes) -> bytes:
        if self.s.schedule == "sequential":  # the part the previous client pushed
            return pack(params_of(self.client_part))
        if self._pull_cache is None:  # the round's global part, the same bytes for every client
            self._pull_cache = pack(params_of(self.client_part))
        return self._pull_cache

    def _forward(self, session: _BodySession, payload: bytes) -> bytes:
        t, _ = unpack(payload)
        dev = self.s.device
        hidden = t["hidden"].to(dev, torch.float32).requires_grad_()
        with session.rng.active():
            out = session.body(hidden, t["attention_mask"].to(dev, torch.long))
        rows = out[t["needed"].to(dev).bool()]
        session.pending = (hidden, rows)
        return pack({"rows": rows.detach().to(self.wire)})

    def _backward(self, session: _BodySession, payload: bytes) -> bytes:
        if session.pending is None:
            raise FesError("split server: gradients without a forward pass")
        t, _ = unpack(payload)
        hidden, rows = session.pending
        session.pending = None
        rows.backward(t["grad"].to(rows.device, torch.float32))
        session.opt.step()
        session.opt.zero_grad(set_to_none=True)
        return pack({"grad": hidden.grad.to(self.wire)})

    def _push(self, session: _BodySession, payload: bytes) -> bytes:
        t, meta = unpack(payload)
        if self.s.schedule == "sequential":
            load_params(self.client_part, t)  # handed on to the next client
        else:
            session.pushed = t
        session.examples = float(meta.get("examples", 1.0))
        return b""

    def end_round(self) -> None:
        """Parallel: the body copies and the pushed client parts averaged (weights: examples)."""
        if self.s.schedule == "sequential":
            return
        done = {c: s for c, s in self.sessions.items() if s.pushed is not None}
        if not done:
            raise FesError(f"split server: no client finished round {self.round_idx}")
        ids = sorted(done)
        weights = torch.tensor([done[c].examples for c in ids], dtype=torch.float64)
        weights = (weights / weights.sum()).tolist()
        load_params(self.body, _average([params_of(done[c].body) for c in ids], weights))
        load_params(self.client_part, _average([done[c].pushed for c in ids], weights))
        self.sessions = {}


def _average(dicts: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    out = {}
    for name in dicts[0]:
        acc = torch.zeros_like(dicts[0][name], dtype=torch.float32)
        for d, w in zip(dicts, weights):
            acc += w * d[name].to(acc.device, torch.float32)
        out[name] = acc
    return out


def split_step(
    part: ClientPart,
    opt: torch.optim.Optimizer,
    link: Link,
    client_id: int,
    batch: Batch,
    rng: PartyRng,
    wire: torch.dtype,
    device: torch.device,
) -> float:
    """One split training step on the client's side: bottom forward, activations up, head
    forward and backward on the rows that come down, their gradients up, the cut's
    gradients down, bottom backward, optimizer step. Returns the loss."""
    ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
    targets = batch.targets.to(device) if batch.targets is not None else None
    with rng.active():
        hidden = part.bottom(ids, mask)
    needed = part.needed(ids, targets)
    up = pack(
        {"hidden": hidden.detach().to(wire), "attention_mask": mask.to(torch.uint8), "needed": needed.to(torch.uint8)}
    )
    rows = unpack(link.exchange("activations", client_id, up))[0]["rows"].to(device, torch.float32)
    rows.requires_grad_()
    with rng.active():
        loss = nn.functional.cross_entropy(part.head(rows), batch.labels.to(device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    down = link.exchange("gradients", client_id, pack({"grad": rows.grad.to(wire)}))
    hidden.backward(unpack(down)[0]["grad"].to(device, torch.float32))
    opt.step()
    return float(loss.detach())


class SplitClient:
    """Plays clients: pulls the client part, trains `local_steps` split steps, pushes it back.

    One template part per process is reused for every client it plays; nothing of a client
    stays in it between rounds (its weights come from the server each time)."""

    def __init__(self, part: ClientPart, shard_of: Callable[[int], Shard], tokenizer, settings: Settings):
        self.part = part.to(settings.device)
        self.shard_of = shard_of
        self.tok = tokenizer
        self.s = settings
        self.wire = WIRE_DTYPES[settings.wire_dtype]

    def play(self, round_idx: int, client_id: int, link: Link) -> dict[str, Any]:
        s = self.s
        shard = self.shard_of(client_id)
        reply = link.exchange("model_pull", client_id, pack({}, {"round": round_idx}))
        load_params(self.part, unpack(reply)[0])
        self.part.train()
        opt = _optimizer(self.part, s)
        gen = torch.Generator().manual_seed(stream_seed(s.seed, round_idx, client_id, _DATA))
        rng = PartyRng(stream_seed(s.seed, round_idx, client_id, _CLIENT_RNG))
        sampler = BatchSampler(self.part.task, shard, self.tok, s.batch_size, s.mask_prob, gen)
        losses = [
            split_step(self.part, opt, link, client_id, sampler.next(), rng, self.wire, s.device)
            for _ in range(s.local_steps)
        ]
        link.exchange("model_push", client_id, pack(params_of(self.part), {"examples": len(shard)}))
        return {
            "client_id": client_id,
            "train_loss": sum(losses) / len(losses),
            "steps": len(losses),
            "examples": len(shard),
        }


class LocalLink:
    """In-process: the bytes go straight to the server's handler (and are counted there)."""

    def __init__(self, server: SplitServer):
        self.server = server

    def exchange(self, kind: str, client_id: int, payload: bytes) -> bytes:
        return self.server.handle(kind, client_id, payload)

"""What crosses the network in split learning, as bytes, and a meter that counts them.

Every message is one `bytes` object: a 4-byte header length, a JSON header (tensor names,
dtypes, shapes and a small `meta` dict) and the tensors' raw bytes. Traffic is the length of
these payloads as sent, counted by the link that carries them: measured, not estimated from
shapes. The same bytes travel in-process and over MPI, so both runtimes count the same.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.uint8,
        torch.bool,
    )
}


def pack(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> bytes:
    """Serialize tensors (moved to CPU, made contiguous) and a JSON-able `meta` into one payload."""
    entries, blobs = [], []
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise TypeError(f"wire: unsupported dtype {t.dtype} for '{name}'")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        entries.append({"name": name, "dtype": dtype, "shape": list(t.shape), "nbytes": len(raw)})
        blobs.append(raw)
    header = json.dumps({"tensors": entries, "meta": dict(meta or {})}, separators=(",", ":")).encode()
    return struct.pack("<I", len(header)) + header + b"".join(blobs)


def unpack(payload: bytes) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors (fresh CPU tensors, writable) and meta of a `pack`ed payload."""
    (n,) = struct.unpack_from("<I", payload, 0)
    header = json.loads(payload[4 : 4 + n].decode())
    offset = 4 + n
    out: dict[str, torch.Tensor] = {}
    for e in header["tensors"]:
        raw = bytearray(payload[offset : offset + e["nbytes"]])
        offset += e["nbytes"]
        dtype = _DTYPES[e["dtype"]]
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[e["name"]] = flat.view(dtype).reshape(e["shape"])
    if offset != len(payload):
        raise ValueError(f"wire: payload has {len(payload) - offset} trailing bytes")
    return out, header["meta"]


@dataclass
class Traffic:
    """Bytes and messages per message kind and direction ('up': client to server)."""

    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    messages: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, direction: str, nbytes: int) -> None:
        key = f"{kind}_{direction}"
        self.bytes[key] += nbytes
        self.messages[key] += 1

    def total(self, *kinds: str) -> int:
        """Bytes of the named kinds (both directions); all when none is named."""
        return sum(v for k, v in self.bytes.items() if not kinds or k.rsplit("_", 1)[0] in kinds)

    def merge(self, other: "Traffic") -> None:
        for k, v in other.bytes.items():
            self.bytes[k] += v
        for k, v in other.messages.items():
            self.messages[k] += v

    def as_dict(self) -> dict[str, int]:
        return {f"bytes_{k}": v for k, v in sorted(self.bytes.items())}

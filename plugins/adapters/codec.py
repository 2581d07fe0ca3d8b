"""Messages as bytes without pickle: a JSON header plus raw tensor bytes.

What crosses a network between machines the server does not control must never be unpickled:
unpickling runs code chosen by the sender. A message's parameters (FedML's `msg_params`: plain
values, lists, dicts, OrderedDicts of tensors) are encoded here as

    b"FES1" | 8-byte little-endian header length | UTF-8 JSON header | tensor bytes

where the header holds the parameter tree with each array replaced by a reference to its entry
in a table (dtype, shape, byte offset and length). Decoding checks the magic, the sizes, each
dtype against an allow-list and each shape against its byte length before any array exists,
and arrays are read as views of the received bytes (no copy, nothing allocated from a
sender's claim). Tuples, OrderedDicts, dicts with non-string keys and torch tensors keep
their types. Anything else (an object, a function) is refused when encoding.
"""

from __future__ import annotations

import json
import math
import struct
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from fedml_fes.errors import FesError

MAGIC = b"FES1"
MAX_HEADER_BYTES = 16 << 20  # the parameter tree without tensors: a few kB in practice
DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}
_TORCH_ONLY = {"bfloat16"}  # numpy has no bfloat16: carried as its raw 2-byte words


class CodecError(FesError):
    """A message that is not one of ours, or lies about its sizes: dropped, never unpickled."""


def _array_of(value: Any) -> tuple[np.ndarray, str, bool]:
    """(contiguous numpy view, dtype name, was a torch tensor)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy(), "bfloat16", True
        return t.numpy(), str(t.numpy().dtype), True
    arr = np.ascontiguousarray(value)
    return arr, str(arr.dtype), False


def encode(params: dict) -> bytes:
    """The parameter tree as FES1 bytes; a value of another type is a one-line error."""
    table: list[dict] = []
    blobs: list[memoryview] = []
    offset = 0

    def walk(x: Any) -> Any:
        nonlocal offset
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, float)):
            if isinstance(x, float) and not math.isfinite(x):
                return {"__float__": repr(x)}
            return x
        if isinstance(x, np.generic):
            return walk(x.item())
        if isinstance(x, (np.ndarray, torch.Tensor)):
            arr, dtype, is_torch = _array_of(x)
            if dtype not in DTYPES:
                raise CodecError(f"cannot send an array of dtype {dtype}")
            raw = memoryview(arr.reshape(-1).view(np.uint8))  # the tensor's own bytes, not a copy
            table.append(
                {"dtype": dtype, "shape": list(arr.shape), "offset": offset, "nbytes": raw.nbytes, "torch": is_torch}
            )
            blobs.append(raw)
            offset += raw.nbytes
            return {"__tensor__": len(table) - 1}
        if isinstance(x, OrderedDict):
            return {"__odict__": [[walk(k), walk(v)] for k, v in x.items()]}
        if isinstance(x, dict):
            if all(isinstance(k, str) and not k.startswith("__") for k in x):
                return {k: walk(v) for k, v in x.items()}
            return {"__dict__": [[walk(k), walk(v)] for k, v in x.items()]}
        if isinstance(x, tuple):
            return {"__tuple__": [walk(v) for v in x]}
        if isinstance(x, list):
            return [walk(v) for v in x]
        raise CodecError(f"cannot send a value of type {type(x).__name__} (plain data and tensors only)")

    header = json.dumps({"params": walk(params), "tensors": table}, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *blobs])  # the one copy of the tensors


def decode(raw: bytes, max_bytes: int) -> dict:
    """FES1 bytes back to the parameter tree, every size checked before an array is made."""
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise CodecError(f"a message must be bytes, got {type(raw).__name__}")
    data = memoryview(raw)
    if len(data) > max_bytes:
        raise CodecError(f"message of {len(data):,} bytes is over the limit of {max_bytes:,}")
    if len(data) < 12 or bytes(data[:4]) != MAGIC:
        raise CodecError("not a FES1 message (a pickle or anything else is never decoded)")
    (size,) = struct.unpack("<Q", data[4:12])
    if size > min(MAX_HEADER_BYTES, len(data) - 12):
        raise CodecError(f"header length {size:,} does not fit the message")
    try:
        header = json.loads(bytes(data[12 : 12 + size]))
        table, tree = header["tensors"], header["params"]
    except (ValueError, KeyError, TypeError) as e:
        raise CodecError(f"unreadable header: {e}") from None
    body = data[12 + size :]
    arrays = [_tensor(entry, body) for entry in table] if isinstance(table, list) else None
    if arrays is None:
        raise CodecError("unreadable header: tensors is not a list")

    def walk(x: Any) -> Any:
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        if len(x) == 1:
            ((key, v),) = x.items()
            if key == "__tensor__":
                if not isinstance(v, int) or not 0 <= v < len(arrays):
                    raise CodecError(f"reference to tensor {v!r}, which the message does not hold")
                return arrays[v]
            if key == "__float__" and v in ("nan", "inf", "-inf"):
                return float(v)
            if key in ("__odict__", "__dict__") and isinstance(v, list):
                pairs = [(walk(p[0]), walk(p[1])) for p in v if isinstance(p, list) and len(p) == 2]
                if len(pairs) != len(v):
                    raise CodecError(f"malformed {key} entry")
                try:
                    return OrderedDict(pairs) if key == "__odict__" else dict(pairs)
                except TypeError as e:
                    raise CodecError(f"malformed {key} entry: {e}") from None
            if key == "__tuple__" and isinstance(v, list):
                return tuple(walk(i) for i in v)
        return {k: walk(v) for k, v in x.items()}

    params = walk(tree)
    if not isinstance(params, dict):
        raise CodecError("a message's parameters must be a mapping")
    return params


def _tensor(entry: Any, body: memoryview) -> Any:
    try:
        dtype, shape, offset, nbytes = entry["dtype"], entry["shape"], entry["offset"], entry["nbytes"]
    except (KeyError, TypeError):
        raise CodecError("malformed tensor entry") from None
    if dtype not in DTYPES:
        raise CodecError(f"tensor dtype {dtype!r} is not allowed")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise CodecError(f"tensor shape {shape!r} is not a list of sizes")
    if not (isinstance(offset, int) and isinstance(nbytes, int) and 0 <= offset and offset + nbytes <= len(body)):
        raise CodecError(f"tensor bytes {offset!r}+{nbytes!r} lie outside the message")
    itemsize = 2 if dtype in _TORCH_ONLY else np.dtype(dtype).itemsize
    if math.prod(shape) * itemsize != nbytes:
        raise CodecError(f"tensor of shape {shape} and dtype {dtype} cannot be {nbytes:,} bytes")
    view = np.frombuffer(body[offset : offset + nbytes], dtype=np.int16 if dtype in _TORCH_ONLY else dtype)
    arr = view.reshape(shape)
    if dtype in _TORCH_ONLY:
        return torch.from_numpy(arr.copy()).view(torch.bfloat16)
    if entry.get("torch"):
        return torch.from_numpy(arr.copy())  # a writable tensor, as the sender had
    return arr

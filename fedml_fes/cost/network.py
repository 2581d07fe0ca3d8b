"""The network between a device and the server: a bandwidth per direction, in MB/s (10^6 bytes).

Transfer time of a client in one phase = bytes down / downlink + bytes up / uplink, plus
`message_s` for each of the two messages that carries bytes. The paper's default is a slow
1 MB/s link both ways with no per-message cost; its sweep runs from 0.1 to 10 MB/s.

`message_s` (`cost_args.message_overhead_s`) is what a real message pays beyond its bytes:
connection and TLS handshake, requests and their round trips. Measured over a shaped link
(`benchmarks/link_cost.py`, docs/COST_MODEL.md "The network term against a real link"):
about 0.002-0.004 s for FedML gRPC and 0.04 s for MQTT_S3 on a link without latency, and
1.22 s for gRPC with 200 ms one-way latency (three round trips: FedML opens a TLS channel
per message).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FesError

MB = 1e6


@dataclass(frozen=True)
class Network:
    down_MBps: float = 1.0
    up_MBps: float = 1.0
    message_s: float = 0.0  # per message that carries bytes, each direction

    def __post_init__(self) -> None:
        for name, value in (("downlink", self.down_MBps), ("uplink", self.up_MBps)):
            if not value > 0:
                raise FesError(f"{name} bandwidth must be > 0 MB/s, got {value:g}")
        if not (self.message_s >= 0 and math.isfinite(self.message_s)):
            raise FesError(f"the per-message overhead must be >= 0 s and finite, got {self.message_s:g}")

    @staticmethod
    def symmetric(mbps: float, message_s: float = 0.0) -> "Network":
        return Network(mbps, mbps, message_s)

    def transfer_seconds(self, bytes_down: float, bytes_up: float) -> float:
        messages = (bytes_down > 0) + (bytes_up > 0)
        return bytes_down / (self.down_MBps * MB) + bytes_up / (self.up_MBps * MB) + messages * self.message_s

    def describe(self) -> str:
        extra = f", {self.message_s:g} s per message" if self.message_s else ""
        if self.down_MBps == self.up_MBps:
            return f"{self.down_MBps:g} MB/s{extra}"
        return f"{self.down_MBps:g} MB/s down, {self.up_MBps:g} MB/s up{extra}"

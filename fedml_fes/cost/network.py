"""The network between a device and the server: a bandwidth per direction, in MB/s (10^6 bytes).

Transfer time of a client in one phase = bytes down / downlink + bytes up / uplink. The
paper's default is a slow 1 MB/s link both ways; its sweep runs from 0.1 to 10 MB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FesError

MB = 1e6


@dataclass(frozen=True)
class Network:
    down_MBps: float = 1.0
    up_MBps: float = 1.0

    def __post_init__(self) -> None:
        for name, value in (("downlink", self.down_MBps), ("uplink", self.up_MBps)):
            if not value > 0:
                raise FesError(f"{name} bandwidth must be > 0 MB/s, got {value:g}")

    @staticmethod
    def symmetric(mbps: float) -> "Network":
        return Network(mbps, mbps)

    def transfer_seconds(self, bytes_down: float, bytes_up: float) -> float:
        return bytes_down / (self.down_MBps * MB) + bytes_up / (self.up_MBps * MB)

    def describe(self) -> str:
        if self.down_MBps == self.up_MBps:
            return f"{self.down_MBps:g} MB/s"
        return f"{self.down_MBps:g} MB/s down, {self.up_MBps:g} MB/s up"

"""Energy of one client task: compute power x compute time + radio power x transfer time.

Idle waiting for the slowest client is not charged (a phone that has finished sleeps).
"""

from __future__ import annotations

from .profiles import DeviceProfile


def task_energy_j(profile: DeviceProfile, compute_s: float, transfer_s: float) -> float:
    return profile.compute_power_w * compute_s + profile.radio_power_w * transfer_s

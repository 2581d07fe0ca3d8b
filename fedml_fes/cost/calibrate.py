"""This host's device profile: time real training and inference batches, fit FLOP/s and overhead.

The compute model says a task takes FLOPs / R + encoder calls x o + update bytes / M. On this
host all three are measured: synthetic batches of the model the runs train (same weights and
threads; fully trained, and biases only, so that the optimizer's share can be told apart) are
timed, their FLOPs and update bytes recorded by the same `TaskMeter` the clients use, and
(R, o, M) fitted by non-negative least squares on the relative error. The fit's own error is the in-sample check;
the benchmark report then compares the model with the time each client task measured in
the runs (out of sample).

On a CPU the clock is the process's CPU time (`time.process_time`), the fastest of a few
repeats after a warm-up: this machine is shared, and wall time under other load measures the
neighbours as much as the model. With one torch thread, CPU time is the time one dedicated
core would take. On CUDA it is wall time around synchronized kernels.
"""

from __future__ import annotations

import contextlib
import math
import platform
import time
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np
import torch
from torch import nn

from ..errors import FesError
from .meter import TaskMeter

TRAIN_SHAPES = ((4, 16), (4, 32), (4, 64), (8, 64), (4, 128))
BIAS_SHAPES = ((4, 32), (4, 64), (8, 64))
INFER_SHAPES = ((16, 32), (64, 32), (16, 64), (64, 64), (4, 16))


@dataclass(frozen=True)
class Timing:
    kind: str  # train | train_bias | infer
    batch: int
    width: int
    flops: float
    calls: float
    update_bytes: float
    seconds: float


def _batch(
    model: nn.Module, batch: int, width: int, vocab: int, gen: torch.Generator, device: torch.device
) -> dict[str, torch.Tensor]:
    ids = torch.randint(1000, max(vocab, 1001), (batch, width), generator=gen)
    out = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
    if hasattr(model, "verbalizer_ids"):  # PromptMLM scores the mask position
        out["mask_pos"] = torch.ones(batch, dtype=torch.long, device=device)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _biases_only(model: nn.Module) -> Iterator[None]:
    """Temporarily train only biases (BitFit), as bias-only methods do; restored afterwards."""
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.requires_grad_(before[n] and (n.endswith("bias") or n == "class_bias"))
    try:
        yield
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(before[n])


def time_batches(
    model: nn.Module,
    vocab: int,
    device: torch.device,
    repeats: int = 3,
    train_shapes=TRAIN_SHAPES,
    infer_shapes=INFER_SHAPES,
    bias_shapes=BIAS_SHAPES,
    seed: int = 0,
) -> list[Timing]:
    """Fastest time of training steps (AdamW, as clients run them) and inference batches."""
    out: list[Timing] = []
    for kind, shapes in (("train", train_shapes), ("train_bias", bias_shapes), ("infer", infer_shapes)):
        with _biases_only(model) if kind == "train_bias" else contextlib.nullcontext():
            out += _time_kind(model, kind, shapes, vocab, device, repeats, torch.Generator().manual_seed(seed))
    return out


def _time_kind(
    model: nn.Module, kind: str, shapes, vocab: int, device: torch.device, repeats: int, gen: torch.Generator
) -> list[Timing]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    out: list[Timing] = []
    for b, w in shapes:
        batch = _batch(model, b, w, vocab, gen, device)
        seconds, meter = [], None
        clock = time.perf_counter if device.type == "cuda" else time.process_time
        for i in range(repeats + 1):
            with TaskMeter(model, device, measure_memory=False) as m:
                _sync(device)
                start = clock()
                if kind != "infer":
                    model.train()
                    loss = torch.log_softmax(model(**batch), dim=-1)[:, 0].mean().neg()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                else:
                    model.eval()
                    with torch.no_grad():
                        model(**batch)
                _sync(device)
                elapsed = clock() - start
            if i:  # the first run warms up allocators and kernels
                seconds.append(elapsed)
                meter = m
        mm = meter.metrics()
        out.append(
            Timing(
                kind,
                b,
                w,
                mm["cost_fwd_flops"] + mm["cost_bwd_flops"],
                mm["cost_encoder_calls"],
                mm["cost_update_bytes"],
                min(seconds),
            )
        )
    return out


@dataclass(frozen=True)
class HostFit:
    flops_per_s: float
    call_overhead_s: float
    memory_bandwidth_Bps: float
    median_abs_pct_error: float
    max_abs_pct_error: float

    def predict(self, flops: float, calls: float, update_bytes: float = 0.0) -> float:
        return flops / self.flops_per_s + calls * self.call_overhead_s + update_bytes / self.memory_bandwidth_Bps


def fit(timings: list[Timing]) -> HostFit:
    """Non-negative least squares on relative error: 1 ~ (F/R + calls o + U/M) / t."""
    if len(timings) < 3:
        raise FesError("calibration needs at least three timed batches")
    t = np.array([x.seconds for x in timings])
    a = (
        np.stack([[x.flops for x in timings], [x.calls for x in timings], [x.update_bytes for x in timings]], axis=1)
        / t[:, None]
    )
    scale = np.maximum(a.max(axis=0), 1e-30)  # conditioning: columns differ by ~10 orders of magnitude
    from scipy.optimize import nnls

    coef, _ = nnls(a / scale, np.ones_like(t))
    coef = coef / scale
    inv_r, overhead, inv_m = (float(c) for c in coef)
    if inv_r <= 0:
        raise FesError("calibration could not fit a throughput (timings do not grow with FLOPs)")
    err = np.abs(a @ coef - 1.0) * 100
    return HostFit(
        1.0 / inv_r, overhead, 1.0 / inv_m if inv_m > 0 else math.inf, float(np.median(err)), float(err.max())
    )


def host_profile(
    fit_: HostFit, timings: list[Timing], compute_power_w: float, radio_power_w: float, memory_bytes: float, note: str
) -> dict:
    """The YAML mapping of this host's calibrated profile, with where each number comes from."""
    cpu = platform.processor() or platform.machine()
    return {
        "name": "host",
        "label": f"this host ({cpu}, {_threads()})",
        "throughput": {"flops_per_s": float(f"{fit_.flops_per_s:.4g}")},
        "call_overhead_s": float(f"{fit_.call_overhead_s:.4g}"),
        **(
            {"memory_bandwidth_Bps": float(f"{fit_.memory_bandwidth_Bps:.4g}")}
            if math.isfinite(fit_.memory_bandwidth_Bps)
            else {}
        ),
        "compute_power_w": compute_power_w,
        "radio_power_w": radio_power_w,
        "memory_bytes": memory_bytes,
        "sources": {
            "flops_per_s": (
                f"measured: least-squares fit over {len(timings)} timed batches of the benchmark's "
                f"model ({note}); fit error median {fit_.median_abs_pct_error:.1f}%, "
                f"max {fit_.max_abs_pct_error:.1f}%"
            ),
            "call_overhead_s": "measured: same fit (per encoder call)",
            "memory_bandwidth_Bps": "measured: same fit (gradient writes + AdamW steps, per byte moved)",
            "compute_power_w": "assumption carried from run_configs/devices/host.yaml (no power meter in this VM)",
            "radio_power_w": "assumption carried from run_configs/devices/host.yaml",
        },
        "notes": {"timings": [asdict(x) for x in timings], "calibrated_at": time.strftime("%Y-%m-%d %H:%M:%S")},
    }


def _threads() -> str:
    n = torch.get_num_threads()
    return f"{n} torch thread{'s' if n > 1 else ''}"

"""The benchmark report: markdown + CSV tables and PNG figures, made from run files only.

`write_report(spec, data, out_dir)` turns the runs (`BenchData`) into the paper's Table 4
(convergence accuracy, relative accuracy, time-to-accuracy on each device), the resource
comparison (traffic, energy, peak memory), the bandwidth sweep, and the check of the
compute model against this host. Every figure is captioned with the model, data, seeds,
device profile and network it came from.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost.network import Network
from ..cost.profiles import DeviceProfile
from . import bench_plots as plots
from .bench_analysis import FULL_LABEL, BenchData, Reach, compute_model_check, label
from .paper_bars import PAPER_BARS as PAPER_TARGETS  # the one set of bars


@dataclass
class ReportSpec:
    title: str
    methods: list[str]  # display order (full_label is added when present)
    targets: list[str]  # methods whose convergence accuracy is a target, e.g. fedfsl, fedfsl_bias
    devices: list[DeviceProfile]
    network: Network
    sweep: list[float]
    provenance: dict[str, Any] = field(default_factory=dict)
    host: DeviceProfile | None = None  # for the compute-model check
    calibration: list[tuple[float, float]] = field(default_factory=list)  # (predicted, measured) seconds
    calibration_note: str = ""

    @property
    def headline(self) -> DeviceProfile:
        return next((d for d in self.devices if d.name == "jetson_tx2"), self.devices[0])


# ---- formatting -------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _hours(r: Reach) -> str:
    if r.seeds == 0:
        return "n/a (no target run)"
    if r.reached == 0:
        return "not reached"
    text = f"{r.hours:.3g} h"
    return text if r.complete else f"{text} ({r.reached}/{r.seeds} seeds; rest not reached)"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else None


def _x(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3g}x" if x < 1000 else f"{x:,.0f}x")


def _mb(b: float | None) -> str:
    if b is None:
        return "-"
    return f"{b / 1e9:.3g} GB" if b >= 1e9 else f"{b / 1e6:.3g} MB" if b >= 1e5 else f"{b / 1e3:.3g} kB"


def _kj(j: float | None) -> str:
    return "-" if j is None else f"{j / 1e3:.3g} kJ" if j >= 100 else f"{j:.3g} J"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows
    ]


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        path.write_text("")
        return
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def _caption(spec: ReportSpec, device: DeviceProfile | None, network: Network | None, extra: str = "") -> str:
    p = spec.provenance
    parts = [
        f"Model: {p.get('model', '?')}",
        f"data: {p.get('dataset_text', '?')}",
        f"seeds: {', '.join(str(s) for s in p.get('seeds', []))}",
    ]
    if device is not None:
        parts.append(
            f"device profile: {device.label} ({device.flops_per_s:.3g} FLOP/s, "
            f"{device.compute_power_w:g} W compute, {device.radio_power_w:g} W radio)"
        )
    if network is not None:
        parts.append(f"network: {network.describe()}")
    return "*" + "; ".join(parts) + (f". {extra}" if extra else ".") + "*"


# ---- the report -------------------------------------------------------------------------------


def write_report(spec: ReportSpec, data: BenchData, out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    methods = [m for m in spec.methods if data.seeds(m)]
    missing = [m for m in spec.methods if not data.seeds(m)]
    labels = {m: label(m) for m in methods + [FULL_LABEL]}
    net, head = spec.network, spec.headline
    first_target = spec.targets[0] if spec.targets else None
    lines = [f"# {spec.title}", "", _setup_text(spec, data), ""]
    if missing:
        lines += [
            f"Missing (no completed run yet): {', '.join(label(m) for m in missing)}. "
            "Re-run the same `fedml-fes bench` command to finish them.",
            "",
        ]

    # headline vs the paper's targets
    head_rows, head_csv = _headline(spec, data, methods)
    lines += [
        "## FeS against the paper's best figures",
        "",
        f"Device {head.label}, network {net.describe()}; targets are the paper's (MobiCom'23, RoBERTa-large). "
        "Measured on our runs, met or not.",
        "",
    ]
    lines += _table(["claim", "paper", "measured here", "met"], head_rows) + [""]
    _write_csv(out_dir / "headline.csv", head_csv)

    # Table 4: accuracy + time to accuracy
    acc_rows, method_csv = [], []
    for m in methods + ([FULL_LABEL] if data.seeds(FULL_LABEL) else []):
        st = data.accuracy_stats(m)
        acc_rows.append(
            [
                labels[m],
                f"{_pct(st['convergence'])} ± {_pct(st['std'])}",
                _pct(st["final"]),
                _pct(st["relative"]) if m != FULL_LABEL else "100.0",
                len(data.seeds(m)),
                f"{st['rounds']:.0f}" if st["rounds"] else "-",
            ]
        )
        method_csv.append(
            {
                "method": m,
                "label": labels[m],
                "seeds": len(data.seeds(m)),
                "convergence_acc": st["convergence"],
                "convergence_std": st["std"],
                "final_acc": st["final"],
                "relative_to_full_label": st["relative"],
            }
        )
    zero = data.zero_shot()
    if zero is not None:  # the untrained prompt model: what training has to beat
        acc_rows.insert(0, ["Zero-shot (untrained prompt model)", _pct(zero), _pct(zero), "-", "-", "0"])
        method_csv.insert(0, {"method": "zero_shot", "label": "Zero-shot", "convergence_acc": zero, "final_acc": zero})
    lines += [
        "## Table 4: accuracy and time to accuracy",
        "",
        f"Convergence accuracy = mean test accuracy of the last {data.tail} evaluated rounds (%; mean ± std "
        "over seeds); relative = convergence accuracy / the full-label FedCLS run's in the same seed.",
        "",
    ]
    lines += _table(
        ["method", "convergence acc (%)", "final acc (%)", "relative to full labels (%)", "seeds", "rounds"], acc_rows
    ) + [""]

    tta_csv = []
    for target in spec.targets:
        header = ["method"]
        rows = {m: [labels[m]] for m in methods}
        for dev in spec.devices:
            ref = data.reach(target, target, dev, net)
            header += [f"{dev.label}: hours", f"speedup vs {label(target)}"]
            for m in methods:
                r = data.reach(m, target, dev, net)
                rows[m] += [_hours(r), _x(_ratio(ref.hours, r.hours)) if r.reached else "X"]
                tta_csv.append(
                    {
                        "target": target,
                        "device": dev.name,
                        "method": m,
                        "hours": r.hours,
                        "reached": r.reached,
                        "seeds": r.seeds,
                        "bytes": r.bytes,
                        "energy_j": r.energy_j,
                        "speedup_vs_target_method": _ratio(ref.hours, r.hours),
                    }
                )
        goal = [data.target(target, s) for s in data.seeds(target)]
        goal_text = ", ".join(_pct(g) for g in goal if g is not None) or "-"
        lines += [
            f"### Hours to {label(target)}'s convergence accuracy ({goal_text}%)",
            "",
            f"Network {net.describe()}. X / not reached: the method never got there within its rounds (the paper's X).",
            "",
        ]
        lines += _table(header, [rows[m] for m in methods]) + [""]
    _write_csv(out_dir / "time_to_accuracy.csv", tta_csv)
    lines += _ablation(spec, data, methods)

    # resources
    res_rows, traffic_t, traffic_all, energy_t, energy_all, mem_parts = [], {}, {}, {}, {}, {}
    for m, row in zip(methods, method_csv):
        reach = data.reach(m, first_target, head, net) if first_target else None
        tot = data.totals(m, head, net)
        mem = data.memory(m)
        mem_parts[m] = mem
        traffic_t[m] = reach.bytes if reach and reach.reached else None
        energy_t[m] = reach.energy_j if reach and reach.reached else None
        traffic_all[m] = tot.bytes if tot else None
        energy_all[m] = tot.energy_j if tot else None
        res_rows.append(
            [
                labels[m],
                _mb(traffic_t[m]) if reach and reach.reached else "not reached",
                _mb(traffic_all[m]),
                _kj(energy_t[m]) if reach and reach.reached else "not reached",
                _kj(energy_all[m]),
                _mb(mem.get("peak")),
                _mb(mem.get("activation_peak")),
                _mb(mem.get("cuda_peak")) if mem.get("cuda_peak") else "-",
            ]
        )
        row.update(
            {
                "traffic_to_target_bytes": traffic_t[m],
                "traffic_total_bytes": traffic_all[m],
                f"energy_to_target_j_{head.name}": energy_t[m],
                f"energy_total_j_{head.name}": energy_all[m],
                "peak_train_bytes": mem.get("peak"),
                "param_bytes": mem.get("param"),
                "resident_param_bytes": mem.get("resident_param"),
                "fill_peak_bytes": mem.get("fill_peak"),
                "grad_bytes": mem.get("grad"),
                "optimizer_bytes": mem.get("optimizer"),
                "activation_peak_bytes": mem.get("activation_peak"),
                "cuda_peak_bytes": mem.get("cuda_peak"),
            }
        )
        for dev in spec.devices:
            t = data.totals(m, dev, net)
            row[f"hours_total_{dev.name}"] = t.hours if t else None
    lines += [
        "## Traffic, energy and peak memory",
        "",
        f"Traffic and energy up to the round that first reaches {label(first_target) if first_target else '-'}'s "
        f"convergence accuracy, and for the whole run; energy on {head.label} at {net.describe()}. Peak training "
        "memory is measured (parameters the training step reads + gradients + AdamW state + tensors saved for "
        "backward; with a frozen bottom filled into the activation cache first, the larger of that and the "
        "fill phase's parameters; docs/BENCHMARK.md).",
        "",
    ]
    lines += _table(
        [
            "method",
            "traffic to target",
            "traffic, whole run",
            "energy to target",
            "energy, whole run",
            "peak training memory",
            "of which activations",
            "CUDA peak",
        ],
        res_rows,
    ) + [""]
    _write_csv(out_dir / "methods.csv", method_csv)

    # figures
    figs: list[tuple[str, str]] = []
    for dev in spec.devices:
        if dev.name == "host":
            continue
        targets = {
            f"{label(t)} ({_pct(mean_target)}%)": mean_target
            for t in spec.targets
            for mean_target in [_mean([data.target(t, s) for s in data.seeds(t)])]
            if mean_target
        }
        curves = {m: data.curve(m, dev, net) for m in methods}
        name = f"accuracy_vs_hours_{dev.name}.png"
        plots.accuracy_vs_hours(
            curves, labels, targets, f"Accuracy vs emulated time on {dev.label}, {net.describe()}", out_dir / name
        )
        figs.append((name, _caption(spec, dev, net, "Dotted lines: target accuracies; mean over seeds")))
    plots.resource_bars(
        methods,
        labels,
        traffic_t,
        {m: v or 0 for m, v in traffic_all.items()},
        energy_t,
        {m: v or 0 for m, v in energy_all.items()},
        head.label,
        out_dir / "traffic_energy.png",
    )
    figs.append(
        (
            "traffic_energy.png",
            _caption(
                spec, head, net, "Solid: up to FedFSL's convergence accuracy (X: never reached); hatched: whole run"
            ),
        )
    )
    plots.memory_bars(methods, labels, mem_parts, out_dir / "memory.png")
    figs.append(("memory.png", _caption(spec, None, None, "Peak over all training tasks of every seed")))

    # bandwidth sweep
    sweep_rows, sweep_csv, sweep_hours = [], [], {m: [] for m in methods}
    if first_target:
        for bw in spec.sweep:
            n = Network(bw, bw * net.up_MBps / net.down_MBps, net.message_s)
            row = [f"{bw:g}"]
            for m in methods:
                r = data.reach(m, first_target, head, n)
                sweep_hours[m].append(r.hours if r.reached else None)
                row.append(_hours(r))
                sweep_csv.append(
                    {
                        "bandwidth_MBps": bw,
                        "device": head.name,
                        "method": m,
                        "hours": r.hours,
                        "reached": r.reached,
                        "seeds": r.seeds,
                    }
                )
            fes = data.reach("fes", first_target, head, n) if "fes" in methods else None
            ref = data.reach(first_target, first_target, head, n)
            row.append(_x(_ratio(ref.hours, fes.hours)) if fes and fes.reached else "-")
            sweep_rows.append(row)
        plots.bandwidth_sweep(
            spec.sweep,
            sweep_hours,
            labels,
            f"Hours to {label(first_target)}'s accuracy vs bandwidth on {head.label}",
            out_dir / "bandwidth_sweep.png",
        )
        figs.append(("bandwidth_sweep.png", _caption(spec, head, None, "Bandwidth swept, same runs")))
    _write_csv(out_dir / "bandwidth_sweep.csv", sweep_csv)

    lines += ["## Figures", ""]
    for name, caption in figs:
        lines += [f"![{name}]({name})", "", caption, ""]
    if sweep_rows:
        lines += [f"### Bandwidth sweep ({head.label}): hours to {label(first_target)}'s convergence accuracy", ""]
        lines += _table(
            ["MB/s"] + [labels[m] for m in methods] + [f"FeS speedup vs {label(first_target)}"], sweep_rows
        ) + [""]

    lines += _profiles_section(spec)
    lines += _model_check_section(spec, data, out_dir)
    lines += _runs_section(data, spec)
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _setup_text(spec: ReportSpec, data: BenchData) -> str:
    p = spec.provenance
    return (
        f"Model {p.get('model', '?')}; {p.get('dataset_text', '?')}; {p.get('rounds', '?')} rounds of "
        f"{p.get('clients_per_round', '?')} training clients, batch {p.get('batch_size', '?')}, max length "
        f"{p.get('max_seq_length', '?')}; seeds {', '.join(str(s) for s in p.get('seeds', []))}; config "
        f"{p.get('config', '?')}. Emulated time, traffic and energy are computed from each run's "
        f"client_costs.csv (FLOPs, encoder calls and payload bytes per client task) with the device profiles "
        f"below and {spec.network.describe()} (docs/BENCHMARK.md has the formulas)."
    )


def _headline(spec: ReportSpec, data: BenchData, methods: list[str]) -> tuple[list[list[str]], list[dict]]:
    head, net = spec.headline, spec.network
    rows, out = [], []

    def add(claim: str, paper: str, value: float | None, goal: float | None, text: str, met: bool | None) -> None:
        rows.append([claim, paper, text, "n/a" if met is None else ("yes" if met else "no")])
        out.append({"claim": claim, "paper": paper, "measured": value, "goal": goal, "met": met})

    if "fes" not in methods or "fedfsl" not in methods:
        add("FeS vs FedFSL", "-", None, None, "needs completed fes and fedfsl runs", None)
        return rows, out
    fes = data.reach("fes", "fedfsl", head, net)
    for ref_m, key in (("fedfsl", "speedup_vs_fedfsl"), ("fedfsl_bias", "speedup_vs_fedfsl_bias")):
        if ref_m not in methods:
            continue
        ref = data.reach(ref_m, "fedfsl", head, net)
        sp = _ratio(ref.hours, fes.hours) if fes.reached and ref.reached else None
        if not fes.reached:
            text, met = "FeS never reached FedFSL's accuracy", False
        elif not ref.reached:  # the baseline never gets there: FeS is faster by any factor
            text, met = f"{label(ref_m)} never reached it; FeS took {_hours(fes)}", True
        else:
            text, met = f"{_x(sp)} ({_hours(ref)} vs {_hours(fes)})", sp is not None and sp >= PAPER_TARGETS[key]
        add(
            f"time to FedFSL's accuracy, {label(ref_m)} / FeS",
            f">= {PAPER_TARGETS[key]:g}x",
            sp,
            PAPER_TARGETS[key],
            text,
            met,
        )
    ref = data.reach("fedfsl", "fedfsl", head, net)
    tr = _ratio(ref.bytes, fes.bytes) if fes.reached and ref.reached else None
    tot_f, tot_s = data.totals("fedfsl", head, net), data.totals("fes", head, net)
    tr_all = _ratio(tot_f.bytes if tot_f else None, tot_s.bytes if tot_s else None)
    add(
        "traffic to FedFSL's accuracy, FedFSL / FeS",
        f">= {PAPER_TARGETS['traffic_reduction']:g}x",
        tr,
        PAPER_TARGETS["traffic_reduction"],
        (
            f"{_x(tr)} ({_mb(ref.bytes)} vs {_mb(fes.bytes)}); whole runs {_x(tr_all)}"
            if tr
            else f"FeS never reached it; whole runs {_x(tr_all)}"
        ),
        tr is not None and tr >= 3000,
    )
    mf, ms = data.memory("fedfsl").get("peak"), data.memory("fes").get("peak")
    mr = _ratio(mf, ms)
    add(
        "peak training memory, FedFSL / FeS",
        f">= {PAPER_TARGETS['memory_reduction']:g}x",
        mr,
        PAPER_TARGETS["memory_reduction"],
        f"{_x(mr)} ({_mb(mf)} vs {_mb(ms)})",
        mr is not None and mr >= 4.5,
    )
    af, a_s = data.accuracy_stats("fedfsl")["convergence"], data.accuracy_stats("fes")["convergence"]
    add(
        "convergence accuracy, FeS vs FedFSL",
        "equal or better",
        (a_s - af) if af is not None and a_s is not None else None,
        0.0,
        f"{_pct(a_s)}% vs {_pct(af)}%",
        None if af is None or a_s is None else a_s >= af - 1e-9,
    )
    return rows, out


ABLATIONS = {"fes_no_cp": "co-planning", "fes_no_rf": "representational filtering", "fes_no_dc": "curriculum pacing"}
PAPER_ABLATION = {"fes_no_cp": "8.0-62.3x", "fes_no_rf": "1.2-3.5x", "fes_no_dc": "1.6-3.5x"}


def _ablation(spec: ReportSpec, data: BenchData, methods: list[str]) -> list[str]:
    """What each design buys: hours to the first target without it / with it (FeS)."""
    present = [m for m in ABLATIONS if m in methods]
    if "fes" not in methods or not present or not spec.targets:
        return []
    target = spec.targets[0]
    rows = []
    for m in present:
        row = [ABLATIONS[m], PAPER_ABLATION[m]]
        for dev in spec.devices:
            fes, abl = data.reach("fes", target, dev, spec.network), data.reach(m, target, dev, spec.network)
            if not fes.reached:
                row.append("FeS not reached")
            elif not abl.reached:
                row.append(f"without it: not reached (FeS {_hours(fes)})")
            else:
                row.append(f"{_x(_ratio(abl.hours, fes.hours))} ({_hours(abl)} vs {_hours(fes)})")
        rows.append(row)
    return (
        [
            f"### Ablation: hours to {label(target)}'s accuracy without each design / with all (FeS)",
            "",
            f"Network {spec.network.describe()}; the paper's range over its four datasets for reference.",
            "",
        ]
        + _table(["design", "paper"] + [d.label for d in spec.devices], rows)
        + [""]
    )


def _profiles_section(spec: ReportSpec) -> list[str]:
    lines = [
        "## Device profiles",
        "",
        "compute(task) = FLOPs / throughput + encoder calls x overhead; energy = compute power x compute time "
        "+ radio power x transfer time.",
        "",
    ]
    rows = [
        [
            d.label,
            f"{d.flops_per_s:.3g}",
            f"{d.call_overhead_s:g}",
            f"{d.compute_power_w:g}",
            f"{d.radio_power_w:g}",
            d.derivation or "-",
            d.path,
        ]
        for d in spec.devices
    ]
    lines += _table(
        ["device", "FLOP/s", "s per encoder call", "compute W", "radio W", "throughput from", "file"], rows
    ) + [""]
    for d in spec.devices:
        for key, src in d.sources.items():
            lines.append(f"- {d.label}, {key}: {' '.join(str(src).split())}")
    return lines + [""]


def _model_check_section(spec: ReportSpec, data: BenchData, out_dir: Path) -> list[str]:
    if spec.host is None:
        return []
    checks, points = compute_model_check(data, spec.host, "cpu")
    wall, _ = compute_model_check(data, spec.host, "wall")
    lines = [
        "## Compute model vs time measured on this host",
        "",
        f"Each client task's FLOPs and encoder calls through the `{spec.host.name}` profile "
        f"({spec.host.flops_per_s:.3g} FLOP/s, {spec.host.call_overhead_s:.3g} s per call; "
        f"{spec.calibration_note or 'from its YAML'}), against the time the task measured in the runs: its "
        "process CPU time (what the profile is calibrated on; robust to other load on a shared machine) and, "
        "for reference, its wall time. Measured times include what the model leaves out (tokenization, "
        "cache files, pseudo-label selection, loading the filtering proxy).",
        "",
    ]
    rows = [
        [
            clock,
            c.phase,
            c.tasks,
            f"{c.median_abs_pct_error:.1f}%",
            f"{c.mean_abs_pct_error:.1f}%",
            f"{c.predicted_s:.1f}",
            f"{c.measured_s:.1f}",
            f"{c.total_ratio:.2f}",
        ]
        for clock, group in (("CPU time", checks), ("wall time", wall))
        for c in group
    ]
    lines += _table(
        [
            "measured as",
            "tasks",
            "count",
            "median abs. error",
            "mean abs. error",
            "model total (s)",
            "measured total (s)",
            "model / measured",
        ],
        rows,
    ) + [""]
    _write_csv(
        out_dir / "compute_model.csv",
        [
            {
                "clock": clock,
                "phase": c.phase,
                "tasks": c.tasks,
                "median_abs_pct_error": c.median_abs_pct_error,
                "mean_abs_pct_error": c.mean_abs_pct_error,
                "model_total_s": c.predicted_s,
                "measured_total_s": c.measured_s,
            }
            for clock, group in (("cpu", checks), ("wall", wall))
            for c in group
        ],
    )
    if points or spec.calibration:
        plots.compute_model_scatter(
            points, spec.calibration, "compute model vs measured CPU time, this host", out_dir / "compute_model.png"
        )
        lines += [
            "![compute_model.png](compute_model.png)",
            "",
            _caption(spec, spec.host, None, "Crosses: the calibration batches the throughput was fitted on"),
            "",
        ]
    return lines


def _runs_section(data: BenchData, spec: ReportSpec) -> list[str]:
    rows = []
    for (m, s), run in sorted(data.runs.items()):
        rows.append(
            [label(m), s, run.status, run.rounds_completed, _pct(run.convergence_accuracy(data.tail)), str(run.run_dir)]
        )
    return (
        ["## Runs", ""]
        + _table(["method", "seed", "status", "rounds", "convergence acc (%)", "run directory"], rows)
        + [""]
    )

"""`fedml-fes bench`: every method on the same partition and seeds, then the cost report.

    <out>/runs/<method>-s<seed>/   one run directory each (metrics.csv, summary.json,
                                   client_costs.csv, ...); full_label-s<seed> is the reference
    <out>/devices/host.yaml        this host's profile, calibrated on the benchmark's model
    <out>/provenance.json          model, data sizes, seeds: what the report's captions state
    <out>/report/                  report.md, CSV tables, PNG figures

Resumable: a run whose summary.json says `completed` (and whose config matches) is kept; a
run left interrupted or failed is moved to <out>/runs/.partial/ (nothing deleted) and run
again. The report is rebuilt from the run files every time, so `--report-only` with another
device or bandwidth re-costs finished runs without training anything.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

import yaml
from tqdm.auto import tqdm

from fedml_fes.config import FesConfig
from fedml_fes.cost.profiles import DeviceProfile, load_profile
from fedml_fes.cost.settings import network_of
from fedml_fes.errors import FesError
from fedml_fes.pretrain.source import mlm_origin
from fedml_fes.report.bench_analysis import BenchData, label
from fedml_fes.report.bench_report import ReportSpec, write_report
from fedml_fes.report.runs import load_run
from fedml_fes_plugins.bench.config import BenchPlan, run_config

Echo = Callable[[str], None]


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a benchmark: the message says what is kept and how to resume."""


IGNORED_SECTIONS = ("cost_args",)  # report-only settings: changing them never re-runs training


def run_dir_of(out: Path, method: str, seed: int) -> Path:
    return out / "runs" / f"{method}-s{seed}"


def _status(run_dir: Path) -> str:
    p = run_dir / "summary.json"
    if not p.is_file():
        return "incomplete" if run_dir.exists() else "missing"
    try:
        return str(json.loads(p.read_text()).get("status", "incomplete"))
    except json.JSONDecodeError:
        return "incomplete"


def _config_changes(run_dir: Path, cfg: FesConfig) -> list[str]:
    """Config keys whose value differs from the finished run's (report-only sections, keys
    that never change results, and sections the method never reads, ignored).
    A key the finished run's config.yaml lacks was added to the project since: unchanged
    while this config leaves it at its default."""
    from fedml_fes.config import read_run_sections, resolve_paths

    # a path counts by the file it names: runs saved before config paths were stored absolute
    # (and defaults such as comm_args.mpi_host_file) are relative to the current directory
    here = Path.cwd()
    saved = resolve_paths(read_run_sections(run_dir), here)
    now = resolve_paths(json.loads(json.dumps(cfg.to_dict())), here)
    defaults = resolve_paths(json.loads(json.dumps(FesConfig().to_dict())), here)
    from fedml_fes.runtime.checkpoint import is_result_key
    from fedml_fes.runtime.inert import inert_keys, is_inert

    inert = inert_keys(cfg.train.method, cfg.model.tuning)
    diff = []
    for sec, values in now.items():
        if sec in IGNORED_SECTIONS:
            continue
        old = saved.get(sec, {})
        diff += [
            f"{sec}.{k}"
            for k, v in values.items()
            if is_result_key(sec, k)
            and not is_inert(f"{sec}.{k}", inert)
            and json.loads(json.dumps(old.get(k, defaults[sec][k]))) != v
        ]
    return diff


def _set_aside(run_dir: Path, echo: Echo) -> None:
    """Move an unfinished run's folder to `.partial/`; a folder a live run holds (another bench or
    harness on this --out, `fedml-fes run`) is one error line and stays where it is."""
    from fedml_fes.runtime.rundir import check_not_locked

    check_not_locked(run_dir)
    dest = run_dir.parent / ".partial" / f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(run_dir), dest)
    echo(f"{run_dir.name}: previous attempt was {_status(dest)}; kept in {dest}, running it again")


def pending_runs(plan: BenchPlan, out: Path) -> list[tuple[str, int, FesConfig]]:
    """Runs still to do, in order; finished runs made with another config are an error."""
    todo = []
    for method, seed in plan.run_names():
        cfg = run_config(plan, method, seed)
        rd = run_dir_of(out, method, seed)
        if _status(rd) == "completed":
            changed = _config_changes(rd, cfg)
            if changed:
                raise FesError(
                    f"{rd} was run with a different config ({', '.join(changed[:4])} changed); "
                    f"use another --out or remove that run directory"
                )
            continue
        todo.append((method, seed, cfg))
    return todo


# ---- this host's profile ---------------------------------------------------------------------


def calibrate_host(plan: BenchPlan, out: Path, echo: Echo) -> Path:
    """Time the benchmark's prompt model (full tuning) on this host; write <out>/devices/host.yaml."""
    from fedml_fes.cost.calibrate import fit, host_profile, time_batches
    from fedml_fes.runtime.job import build_job
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    path = out / "devices" / "host.yaml"
    if path.is_file():
        return path
    method = next((m for m in ("fedfsl", "fes_no_cp", "prompt_only") if m in plan.args.methods), plan.args.methods[0])
    cfg = run_config(plan, method, plan.args.seeds[0])
    ensure_mlm_build(cfg, echo)
    echo(f"calibrating this host on the {method} model (a minute)...")
    job = build_job(cfg, role="both", run_dir=out / "calibration")
    timings = time_batches(job.model, len(job.tokenizer), job.device)
    result = fit(timings)
    base = load_profile("host", plan.base.cost.device_dir or None)
    raw = host_profile(
        result,
        timings,
        base.compute_power_w,
        base.radio_power_w,
        base.memory_bytes,
        f"{cfg.model.model}, {method}, {cfg.common.torch_threads or 'default'} torch threads",
    )
    from fedml_fes.cost.profiles import save_profile

    save_profile(raw, path)
    shutil.rmtree(out / "calibration", ignore_errors=True)
    echo(
        f"this host: {result.flops_per_s:.3g} FLOP/s, {result.call_overhead_s * 1e3:.2f} ms per encoder call, "
        f"{result.memory_bandwidth_Bps / 1e9:.3g} GB/s for optimizer updates (fit error median "
        f"{result.median_abs_pct_error:.1f}%, max {result.max_abs_pct_error:.1f}%)"
    )
    return path


# ---- provenance ----------------------------------------------------------------------------


def write_provenance(plan: BenchPlan, out: Path) -> dict:
    path = out / "provenance.json"
    sections = [k for k in plan.base.to_dict() if k not in IGNORED_SECTIONS]
    fingerprint = plan.base.fingerprint(*sections)
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("seeds") == list(plan.args.seeds) and saved.get("fingerprint") == fingerprint:
            return saved
    from fedml_fes.data.federated import build_federated_data

    cfg = plan.base
    data, _ = build_federated_data(cfg)
    train = sum(c.num_gold + len(c.unlabeled) for c in data.clients)
    d, m = cfg.data, cfg.model
    model = m.model + (f" + MLM head: {mlm_origin(m.mlm_from, m.mlm_on_job_data)}" if m.mlm_from else "")
    text = (
        f"{d.dataset}: {train:,} training examples over {data.num_clients} clients ({data.partition}), "
        f"{d.gold_labels} gold labels (gamma {d.gold_sparsity:g}), {len(data.test):,} test examples"
    )
    prov = {
        "model": model,
        "dataset": d.dataset,
        "train_examples": train,
        "test_examples": len(data.test),
        "clients": data.num_clients,
        "gold_labels": d.gold_labels,
        "dataset_text": text,
        "seeds": list(plan.args.seeds),
        "rounds": cfg.train.comm_round,
        "clients_per_round": cfg.train.client_num_per_round,
        "batch_size": cfg.train.batch_size,
        "max_seq_length": m.max_seq_length,
        "config": plan.source,
        "fingerprint": fingerprint,
    }
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prov, indent=2))
    return prov


# ---- report ---------------------------------------------------------------------------------


def devices_for(plan: BenchPlan, out: Path, names: list[str] | None = None) -> list[DeviceProfile]:
    """Profiles by name; the bench's calibrated host.yaml comes first, then cost_args.device_dir."""
    names = names or list(plan.base.cost.devices)
    out_dir = out / "devices"
    profiles = []
    for n in names:
        if (out_dir / f"{n}.yaml").is_file():
            profiles.append(load_profile(n, out_dir))
        else:
            profiles.append(load_profile(n, plan.base.cost.device_dir or None))
    return profiles


def build_report(
    plan: BenchPlan,
    out: Path,
    devices: list[DeviceProfile] | None = None,
    bandwidth: float | None = None,
    echo: Echo = print,
) -> Path:
    cost = plan.base.cost
    devices = devices or devices_for(plan, out)
    runs = {}
    for method, seed in plan.run_names():
        rd = run_dir_of(out, method, seed)
        if _status(rd) == "completed":
            runs[(method, seed)] = run = load_run(rd)
            if not run.tasks:
                raise FesError(f"{rd} has no client_costs.csv (made before cost recording): remove it and re-run")
    if not runs:
        raise FesError(f"no completed run in {out / 'runs'} yet: run `fedml-fes bench` without --report-only first")
    data = BenchData(runs, tail=cost.convergence_tail)
    network = network_of(cost, bandwidth)
    host = next((d for d in devices if d.name == "host"), None)
    if host is None and (out / "devices" / "host.yaml").is_file():
        host = load_profile("host", out / "devices")
    calibration, note = [], ""
    if host is not None and host.path.startswith(str(out)):
        timings = (yaml.safe_load(Path(host.path).read_text()).get("notes") or {}).get("timings") or []
        calibration = [
            (host.compute_seconds(t["flops"], t["calls"], t.get("update_bytes", 0.0)), t["seconds"]) for t in timings
        ]
        note = f"fitted on {len(timings)} batches timed before the runs ({host.path})"
    prov_path = out / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
    spec = ReportSpec(
        plan.args.title,
        list(plan.args.methods),
        [t for t in plan.args.targets],
        devices,
        network,
        list(cost.bandwidth_sweep),
        prov,
        host,
        calibration,
        note,
    )
    path = write_report(spec, data, out / "report")
    echo(f"report: {path}")
    return path


# ---- the benchmark --------------------------------------------------------------------------


def run_bench(
    plan: BenchPlan,
    out: Path,
    progress: bool = True,
    echo: Echo = print,
    devices: list[str] | None = None,
    bandwidth: float | None = None,
) -> Path:
    from fedml_fes.runtime.rundir import make_run_dir, release_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    out = Path(out)
    profiles = devices_for(plan, out, devices)  # unknown device names fail before any training
    if bandwidth is not None and not bandwidth > 0:
        raise FesError(f"--bandwidth must be > 0 MB/s, got {bandwidth:g}")
    todo = pending_runs(plan, out)
    write_provenance(plan, out)
    if plan.args.calibrate_host and any(p.name == "host" for p in profiles):
        calibrate_host(plan, out, echo)
        profiles = devices_for(plan, out, devices)
    total = sum(cfg.train.comm_round for _, _, cfg in todo)
    done = len(plan.run_names()) - len(todo)
    echo(
        f"benchmark {plan.args.title}: {len(plan.run_names())} runs, {done} already complete, "
        f"{len(todo)} to do ({total} rounds) in {out}"
    )
    bar = tqdm(total=total, desc="bench", unit="round", disable=not progress, dynamic_ncols=True)
    say = bar.write if progress else echo
    current = ""
    try:
        for method, seed, cfg in todo:
            rd = run_dir_of(out, method, seed)
            if rd.exists():
                _set_aside(rd, say)
            current = f"{label(method)} seed {seed}"
            bar.set_description(current)
            start = time.time()

            def on_line(line: str, _m=method, _s=seed) -> None:
                if line.startswith("round"):
                    bar.update(1)
                    if not progress:
                        echo(f"  [{_m} s{_s}] {line}")
                else:
                    say(f"  [{_m} s{_s}] {line}")

            try:  # held as `fedml-fes run` holds its folder: two benches on one --out never share a run
                summary = run_in_process(cfg, make_run_dir(cfg, str(rd), lock=True), progress=False, echo=on_line)
            finally:
                release_run_dir(rd)
            say(
                f"{current}: {summary.get('status')}, final accuracy {summary.get('final')}, "
                f"{time.time() - start:.0f} s"
            )
    except KeyboardInterrupt:
        bar.close()
        raise BenchInterrupted(
            f"bench interrupted during {current}; finished runs are kept in {out / 'runs'} "
            f"(the interrupted one is marked so); run the same command again to resume"
        ) from None
    finally:
        bar.close()
    return build_report(plan, out, profiles, bandwidth, echo)

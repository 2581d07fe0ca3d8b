"""Arguments and entry of `fedml-fes bench` (kept out of cli.py, which only registers it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedml_fes.config import add_set_argument, parse_overrides
from fedml_fes.errors import FesError
from fedml_fes_plugins.bench.config import PRESETS, BenchPlan, load_bench, preset_path, run_config

SUITES = ("bench", "fidelity")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--suite",
        choices=SUITES,
        default="bench",
        help="bench (default): the cost benchmark of --preset/--cf; fidelity: FedCLS, Prompt-only, "
        "Pseudo-only, FedFSL and FeS on AG News, BBC News and TREC-6, seeds 0 1 2, one shared "
        "config (--cf, default run_configs/fidelity.yaml; benchmarks/fidelity.py is the same)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help="smoke (CI, minutes), cpu (this machine, under an hour), paper (roberta-large, GPU); default smoke",
    )
    src.add_argument("--cf", default=None, help="a bench config YAML (run config + bench_args)")
    p.add_argument("--out", default=None, help="benchmark directory (default runs/bench/<preset or config name>)")
    p.add_argument("--methods", nargs="+", default=None, help="only these methods (default: the preset's)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="only these seeds (default: the preset's)")
    p.add_argument(
        "--device",
        action="append",
        default=None,
        metavar="PROFILE",
        help="device profile for the report (name in run_configs/devices or a .yaml path; repeatable; "
        "default cost_args.devices)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="MBPS",
        help="network bandwidth in MB/s for the report (default cost_args.bandwidth_MBps)",
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs; train nothing")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check every run's config, data, partition and prompt and say what it would do; train "
        "nothing, write nothing",
    )
    p.add_argument("--no-full-label", action="store_true", help="skip the full-label reference runs")
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
    add_set_argument(p, "override a run-config key for every run, e.g. --set train_args.comm_round=3")
    from fedml_fes_plugins.bench.fidelity import add_arguments as add_fidelity_arguments

    add_fidelity_arguments(p, standalone=False)


def dry_run(plans: dict[str, BenchPlan]) -> int:
    """Every run of the plans checked as a real run checks it, and one line of what it would do."""
    from fedml_fes.runtime.preview import preview_run

    for name, plan in plans.items():
        for method, seed in plan.run_names():
            lines = preview_run(run_config(plan, method, seed))
            what = next(line for line in lines if line.startswith("method: "))
            size = next(line for line in lines if line.startswith("trainable: "))
            print(f"{name} {method} s{seed}: {what[len('method: ') :]}; {size[len('trainable: ') :]}", flush=True)
    print("dry run: every run checked; nothing trained or written", flush=True)
    return 0


def run_bench_command(opts: argparse.Namespace) -> int:
    if opts.suite == "fidelity":
        return _run_fidelity(opts)
    given = [
        flag
        for flag, value in (
            ("--datasets", opts.datasets),
            ("--agnews-dir", opts.agnews_dir),
            ("--dataset-file", opts.dataset_file),
            ("--results", opts.results),
        )
        if value is not None
    ]
    if given or opts.jobs != 1:
        raise FesError(f"{(given or ['--jobs'])[0]} belongs to --suite fidelity")
    from fedml_fes_plugins.bench.runner import BenchInterrupted, build_report, devices_for, run_bench

    source = Path(opts.cf) if opts.cf else preset_path(opts.preset or "smoke")
    choices = {"methods": opts.methods, "seeds": opts.seeds, "full_label": False if opts.no_full_label else None}
    plan = load_bench(source, parse_overrides(opts.set), {k: v for k, v in choices.items() if v is not None})
    if opts.dry_run:
        return dry_run({source.stem: plan})
    if opts.bandwidth is not None and not opts.bandwidth > 0:
        raise FesError(f"--bandwidth must be > 0 MB/s, got {opts.bandwidth:g}")
    name = opts.preset or (source.stem if opts.cf else "smoke")
    out = Path(opts.out) if opts.out else Path(plan.base.common.output_dir) / "bench" / name
    progress = not opts.no_progress and sys.stderr.isatty()
    echo = lambda line: print(line, flush=True)  # noqa: E731 (lines, as they happen, also into a log)
    try:
        if opts.report_only:
            path = build_report(plan, out, devices_for(plan, out, opts.device), opts.bandwidth, echo)
        else:
            path = run_bench(plan, out, progress=progress, echo=echo, devices=opts.device, bandwidth=opts.bandwidth)
    except BenchInterrupted as e:
        print(f"fedml-fes: {e}", file=sys.stderr)
        return 130
    print_headline(path)
    return 0


def _run_fidelity(opts: argparse.Namespace) -> int:
    from fedml_fes_plugins.bench.fidelity import run_command

    wrong = [
        flag
        for flag, value in (("--preset", opts.preset), ("--device", opts.device), ("--bandwidth", opts.bandwidth))
        if value is not None
    ]
    wrong += ["--no-full-label"] if opts.no_full_label else []
    if wrong:
        raise FesError(
            f"{wrong[0]} is a --suite bench option (the fidelity suite reports TX2 hours at the "
            f"config's cost_args bandwidth)"
        )
    if opts.dry_run:
        from fedml_fes_plugins.bench.fidelity import check_options, options_from, plans

        options = options_from(opts, "fedml-fes bench --suite fidelity")
        check_options(options)
        return dry_run(plans(options))
    return run_command(opts, "fedml-fes bench --suite fidelity")


def print_headline(report: Path) -> None:
    """The report's headline table and Table 4 accuracy on stdout; the rest is in the files."""
    text = report.read_text().splitlines()
    keep, on = [], False
    for line in text:
        if line.startswith("## "):
            on = line.startswith(("## FeS against", "## Table 4", "## Traffic"))
        if on:
            keep.append(line)
    print("\n".join(keep).strip())
    print(f"\nfull report: {report} (figures and CSV tables beside it)")

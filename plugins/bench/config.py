"""Benchmark configs: a run config (FedML-style sections) plus a `bench_args` section.

    bench_args:
      title: FeS benchmark on AG News (MiniLM)
      methods: [fedcls, fedfsl, fedfsl_bias, fes, fes_no_cp, fes_no_rf, fes_no_dc]
      seeds: [0]
      full_label: true            # + a full-label FedCLS reference run per seed
      targets: [fedfsl, fedfsl_bias]
      calibrate_host: true        # time this host on the benchmark's model first
      method_overrides:           # per-method changes, e.g. bias-only learning rate
        fedfsl_bias: {train_args.learning_rate: 0.001}

Presets: `smoke` (CI, minutes), `cpu` (this machine, under an hour), `paper` (roberta-large,
the paper's settings, for a GPU machine) are run_configs/bench/<preset>.yaml (a folder of
their own: they are not plain run configs, which run_configs/*.yaml all are). Every method
and seed runs on the same partition (same data section and seed), changing only
`train_args.method`, the seed and the method's overrides.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from fedml_fes.config import (
    METHODS,
    FesConfig,
    apply_overrides,
    config_from_dict,
    read_sections,
    resolve_override_paths,
)
from fedml_fes.errors import FesError

PRESETS = ("smoke", "cpu", "paper")
REPO = Path(__file__).resolve().parents[2]
FULL_LABEL = "full_label"
DEFAULT_METHODS = ["fedcls", "fedfsl", "fedfsl_bias", "fes", "fes_no_cp", "fes_no_rf", "fes_no_dc"]


@dataclass
class BenchArgs:
    title: str = "FeS benchmark"
    methods: list = field(default_factory=lambda: list(DEFAULT_METHODS))
    seeds: list = field(default_factory=lambda: [0])
    full_label: bool = True
    targets: list = field(default_factory=lambda: ["fedfsl", "fedfsl_bias"])
    calibrate_host: bool = True
    method_overrides: dict = field(default_factory=dict)


@dataclass
class BenchPlan:
    source: str
    args: BenchArgs
    raw: dict  # the run config's sections, before per-method changes
    base: FesConfig

    def run_names(self) -> list[tuple[str, int]]:
        methods = list(self.args.methods) + ([FULL_LABEL] if self.args.full_label else [])
        return [(m, s) for s in self.args.seeds for m in methods]


def preset_path(preset: str) -> Path:
    if preset not in PRESETS:
        raise FesError(f"unknown bench preset '{preset}' (known: {', '.join(PRESETS)})")
    for root in (Path("."), REPO):
        p = root / "run_configs" / "bench" / f"{preset}.yaml"
        if p.is_file():
            return p
    raise FesError(f"preset file run_configs/bench/{preset}.yaml not found (in ./run_configs/bench or {REPO})")


def _bench_args(raw: Any, source: str) -> BenchArgs:
    args = BenchArgs()
    if raw is None:
        return args
    if not isinstance(raw, Mapping):
        raise FesError(f"{source}: bench_args must be a mapping")
    known = [f.name for f in fields(BenchArgs)]
    for key, value in raw.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
            raise FesError(f"unknown config key '{key}' in {source} section 'bench_args'{hint}")
        setattr(args, key, value)
    for key in ("methods", "seeds", "targets"):
        if not isinstance(getattr(args, key), list):
            raise FesError(f"{source}: bench_args.{key} must be a list, got {getattr(args, key)!r}")
    bad = [m for m in args.methods + args.targets if split_variant(m)[0] not in METHODS or m == "fedbert_mlm"]
    if bad:
        raise FesError(
            f"{source}: bench_args method '{bad[0]}' is not a few-shot method "
            f"({', '.join(m for m in METHODS if m != 'fedbert_mlm')})"
        )
    if not args.methods:
        raise FesError(f"{source}: bench_args.methods is empty")
    if not args.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in args.seeds):
        raise FesError(f"{source}: bench_args.seeds must be a list of integers, got {args.seeds!r}")
    if not isinstance(args.method_overrides, Mapping):
        raise FesError(f"{source}: bench_args.method_overrides must map a method to section.key: value")
    for m, changes in args.method_overrides.items():
        if split_variant(m)[0] not in METHODS and m != FULL_LABEL:
            raise FesError(f"{source}: bench_args.method_overrides names unknown method '{m}'")
        if not isinstance(changes, Mapping) or any("." not in str(k) for k in changes):
            raise FesError(f"{source}: bench_args.method_overrides.{m} must map section.key to a value")
    return args


def load_bench(
    path: str | Path, overrides: Mapping[str, Any] | None = None, bench_overrides: Mapping[str, Any] | None = None
) -> BenchPlan:
    """Read a bench YAML; `overrides` ('section.key' -> value) change the run config (CLI --set),
    `bench_overrides` (key -> value) its bench_args (CLI --methods, --seeds)."""
    p = Path(path)
    if not p.is_file():
        raise FesError(f"bench config not found: {p}")
    raw = read_sections(p, overrides)
    bench_raw = raw.pop("bench_args", None) or {}
    if not isinstance(bench_raw, Mapping):
        raise FesError(f"{p}: bench_args must be a mapping")
    args = _bench_args({**bench_raw, **(bench_overrides or {})}, str(p))
    # paths in the file's method_overrides resolve against its folder, like its sections' paths
    args.method_overrides = {
        m: resolve_override_paths(changes, p.absolute().parent) for m, changes in args.method_overrides.items()
    }
    base = config_from_dict(copy.deepcopy(raw), source=str(p))
    plan = BenchPlan(str(p), args, raw, base)
    for m, s in plan.run_names():  # every run's config is valid before anything runs
        run_config(plan, m, s)
    return plan


def split_variant(name: str) -> tuple[str, str | None]:
    """A run name's method and labeler: `fedfsl@contextual` is FedFSL with `pseudo_args.labeler:
    contextual`, a row beside the shared config's own `fedfsl`; a plain method name has no labeler
    of its own. `@paper` is the paper's labeling as a whole (PAPER_LABELING)."""
    method, _, labeler = name.partition("@")
    return method, (labeler or None)


# what `method@paper` sets: the paper's labeling (its FedFSL and FeS), whatever the shared config adds
PAPER_LABELING = {
    "labeler": "paper",
    "augment_word_dropout": 0.0,
    "sample_by_labels": False,
    "gold_every_round": False,
}


def run_config(plan: BenchPlan, method: str, seed: int) -> FesConfig:
    """The config of one run: the base, this method (or `method@labeler` variant) and seed, and
    the method's overrides."""
    raw = copy.deepcopy(plan.raw)
    base, labeler = split_variant(method)
    raw.setdefault("train_args", {})["method"] = "fedcls" if method == FULL_LABEL else base
    if labeler is not None:
        raw.setdefault("pseudo_args", {}).update(PAPER_LABELING if labeler == "paper" else {"labeler": labeler})
    raw.setdefault("common_args", {})["random_seed"] = seed
    apply_overrides(raw, plan.args.method_overrides.get(method) or {}, plan.source)
    if method == FULL_LABEL:  # every training example is a gold label, spread over all clients
        raw.setdefault("data_args", {}).update(
            {"gold_labels": _train_size(plan), "gold_sparsity": 100.0, "gold_clients": 0}
        )
    return config_from_dict(raw, source=f"{plan.source} ({method}, seed {seed})")


def _train_size(plan: BenchPlan) -> int:
    if not hasattr(plan, "_train_size"):
        from fedml_fes.data.federated import load_splits

        plan._train_size = len(load_splits(plan.base)[0])
    return plan._train_size

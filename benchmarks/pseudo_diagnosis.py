"""Why pseudo labels do not lift Prompt-only on SmolLM2: FedFSL variants, on tuning seeds only.

    .venv/bin/python benchmarks/pseudo_diagnosis.py --variant oracle --datasets trec --seeds 10
    .venv/bin/python benchmarks/pseudo_diagnosis.py --variant hard --datasets bbc_news trec --seeds 10

Every run is the fidelity suite's FedFSL run (run_configs/fidelity.yaml, the same harness and
partition), with one thing changed:
- `shared`: nothing (the shared config: soft labels, the model's own distribution);
- `hard`: `pseudo_args.soft_labels=false`, the argmax as a one-hot target;
- `conf80`, `conf90`: only predictions at least 0.8 / 0.9 confident are kept
  (`pseudo_args.confidence_threshold`; per pass still at most `per_pass`); `hard90`: both;
- `oracle`: the same examples the model selected, each labeled with its true class. A
  diagnostic, never a method (no client has these labels): it bounds what better pseudo
  labels could add in this setting (10 rounds, 5 clients a round, FedAvg by sample count).
Runs go to `<out>/<variant>/<dataset>/runs/fedfsl-s<seed>` (resumable), each variant's table to
`<out>/<variant>/fidelity.md`. Use seeds >= 10: the reported seeds 0-2 are never tuned on.

    .venv/bin/python benchmarks/pseudo_diagnosis.py --calibration RUN_DIR [RUN_DIR ...]

reads the last pass's pseudo labels of a finished run with soft labels (each labeling client's
`clients/<id>/pseudo_labels.json`) and prints, per confidence threshold, the share of them kept
and how many of those are right (the hidden truth, from the run's own config and seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from fedml_fes.errors import FesError
from fedml_fes_plugins.bench.fidelity import run_command

VARIANTS = {
    "shared": [],
    "hard": ["pseudo_args.soft_labels=false"],
    "oracle": [],
    "conf80": ["pseudo_args.confidence_threshold=0.8"],
    "conf90": ["pseudo_args.confidence_threshold=0.9"],
    "hard90": ["pseudo_args.soft_labels=false", "pseudo_args.confidence_threshold=0.9"],
}


def use_true_labels() -> None:
    """Replace every kept pseudo label by the example's true class (the evaluator's oracle)."""
    from fedml_fes.data import federated
    from fedml_fes.runtime import methods

    seen: dict = {}
    build_oracle, label = federated.LabelOracle.__init__, methods.FewShot.label

    def keep_oracle(self, labels_by_example_id):
        build_oracle(self, labels_by_example_id)
        seen["oracle"] = self

    def true_labels(self, *args, **kwargs):
        pseudo, inferred = label(self, *args, **kwargs)
        if len(pseudo):
            truth = seen["oracle"].labels_of(list(pseudo.example_ids))
            pseudo = dataclasses.replace(pseudo, labels=truth, probs=[])
        return pseudo, inferred

    federated.LabelOracle.__init__ = keep_oracle
    methods.FewShot.label = true_labels


THRESHOLDS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)


def last_pass(run_dir: Path) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """(classes, confidence, pseudo label, true class) of every labeling client's last pass."""
    from fedml_fes.config import load_run_config
    from fedml_fes.data.federated import build_federated_data

    data, oracle = build_federated_data(load_run_config(run_dir))
    conf, label, truth = [], [], []
    for path in sorted((run_dir / "clients").glob("*/pseudo_labels.json")):
        stored = json.loads(path.read_text())
        if not stored["probs"]:
            raise FesError(f"{path} holds no probabilities (a run with pseudo_args.soft_labels=false)")
        conf += [max(p) for p in stored["probs"]]
        label += stored["labels"]
        truth += oracle.labels_of(stored["example_ids"])
    return data.classes, np.asarray(conf), np.asarray(label, dtype=int), np.asarray(truth, dtype=int)


def calibration(passes: tuple) -> list[tuple[float, int, float]]:
    """(threshold, labels kept, their accuracy) over `last_pass`'s labels."""
    _, conf, label, truth = passes
    rows = []
    for t in THRESHOLDS:
        kept = conf >= t
        rows.append((t, int(kept.sum()), float((label[kept] == truth[kept]).mean()) if kept.any() else float("nan")))
    return rows


def confusion(passes: tuple, threshold: float = 0.0) -> np.ndarray:
    """Counts of (true class, pseudo label) among `last_pass`'s labels at least `threshold` confident."""
    classes, conf, label, truth = passes
    counts = np.zeros((len(classes), len(classes)), dtype=int)
    np.add.at(counts, (truth[conf >= threshold], label[conf >= threshold]), 1)
    return counts


def print_calibration(run_dirs: list[str]) -> int:
    for rd in map(Path, run_dirs):
        passes = last_pass(rd)  # builds the run's data once: the truth for every table below
        rows = calibration(passes)
        total = rows[0][1]
        print(f"{rd}: {total} pseudo labels in the last pass")
        print("| confidence >= | kept | share | accuracy |\n|---|---|---|---|")
        for t, n, acc in rows:
            print(f"| {t:.2f} | {n} | {n / total:.0%} | {acc:.3f} |")
        classes = passes[0]
        for t in (0.0, 0.9):
            print(f"\ntrue class (rows) against pseudo label (columns), confidence >= {t:.1f}:")
            print("| | " + " | ".join(classes) + " |\n|" + "---|" * (len(classes) + 1))
            for name, row in zip(classes, confusion(passes, t)):
                print(f"| {name} | " + " | ".join(str(int(x)) for x in row) + " |")
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calibration", nargs="+", metavar="RUN_DIR", help="print confidence against accuracy and stop")
    p.add_argument("--variant", choices=sorted(VARIANTS))
    p.add_argument("--datasets", nargs="+", default=["bbc_news", "trec"])
    p.add_argument("--seeds", nargs="+", type=int, default=[10])
    p.add_argument("--methods", nargs="+", default=["fedfsl"], help="fedfsl (default), or prompt_only etc. beside it")
    p.add_argument("--out", default="runs/pseudo_diagnosis")
    p.add_argument("--agnews-dir", default=None)
    p.add_argument("--set", action="append", default=[], help="another run-config key for every run (a quick look)")
    opts = p.parse_args(argv)
    if opts.calibration:
        try:
            return print_calibration(opts.calibration)
        except FesError as e:
            print(f"pseudo_diagnosis: error: {e}", file=sys.stderr)
            return 1
    if opts.variant is None:
        p.error("--variant or --calibration is required")
    if min(opts.seeds) < 10:
        print("pseudo_diagnosis: error: seeds 0-2 are the reported ones; diagnose on seeds >= 10", file=sys.stderr)
        return 1
    if opts.variant == "oracle":
        use_true_labels()
    out = f"{opts.out}/{opts.variant}"
    fidelity = argparse.Namespace(
        cf=None,
        out=out,
        results=out,
        methods=opts.methods,
        seeds=opts.seeds,
        datasets=opts.datasets,
        agnews_dir=opts.agnews_dir,
        dataset_file=None,
        jobs=1,
        set=VARIANTS[opts.variant] + opts.set,
        report_only=False,
    )
    try:
        return run_command(fidelity, f".venv/bin/python benchmarks/pseudo_diagnosis.py --variant {opts.variant}")
    except FesError as e:
        print(f"pseudo_diagnosis: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

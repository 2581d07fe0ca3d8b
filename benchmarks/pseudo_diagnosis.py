"""Why pseudo labels do not lift Prompt-only on SmolLM2: FedFSL variants, on tuning seeds only.

    .venv/bin/python benchmarks/pseudo_diagnosis.py --variant oracle --datasets trec --seeds 10
    .venv/bin/python benchmarks/pseudo_diagnosis.py --variant hard --datasets bbc_news trec --seeds 10

Every run is the fidelity suite's FedFSL run (run_configs/fidelity.yaml, the same harness and
partition), with one thing changed:
- `shared`: nothing (the shared config: soft labels, the model's own distribution);
- `hard`: `pseudo_args.soft_labels=false`, the argmax as a one-hot target;
- `oracle`: the same examples the model selected, each labeled with its true class. A
  diagnostic, never a method (no client has these labels): it bounds what better pseudo
  labels could add in this setting (10 rounds, 5 clients a round, FedAvg by sample count).
Runs go to `<out>/<variant>/<dataset>/runs/fedfsl-s<seed>` (resumable), each variant's table to
`<out>/<variant>/fidelity.md`. Use seeds >= 10: the reported seeds 0-2 are never tuned on.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from fedml_fes.errors import FesError
from fedml_fes_plugins.bench.fidelity import run_command

VARIANTS = {"shared": [], "hard": ["pseudo_args.soft_labels=false"], "oracle": []}


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    p.add_argument("--datasets", nargs="+", default=["bbc_news", "trec"])
    p.add_argument("--seeds", nargs="+", type=int, default=[10])
    p.add_argument("--out", default="runs/pseudo_diagnosis")
    p.add_argument("--agnews-dir", default=None)
    p.add_argument("--set", action="append", default=[], help="another run-config key for every run (a quick look)")
    opts = p.parse_args(argv)
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
        methods=["fedfsl"],
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

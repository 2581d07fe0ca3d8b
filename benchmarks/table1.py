"""The paper's Table 1 on our setting: FedCLS vs Prompt-only vs Pseudo-only vs FedFSL.

    .venv/bin/python benchmarks/table1.py                      # AG News, seeds 0 1 2
    .venv/bin/python benchmarks/table1.py --seeds 0 --rounds 5 # quicker look

Every method and seed runs on the same config (run_configs/agnews_fedfsl.yaml unless --cf)
with only `train_args.method` and `common_args.random_seed` changed, in-process. Runs are
resumable: a run whose summary.json says completed is not run again. The table (markdown and
CSV) is written from the runs' summary.json files only, with the mean and standard deviation
over seeds of the final test accuracy, plus a full-label FedCLS reference.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402  (benchmarks/common.py)

from fedml_fes.config import load_config
from fedml_fes.errors import FesError

METHODS = ("fedcls", "prompt_only", "pseudo_only", "fedfsl")
LABELS = {
    "fedcls": "FedCLS (vanilla)",
    "prompt_only": "Prompt-only",
    "pseudo_only": "Pseudo-only",
    "fedfsl": "FedFSL (prompt + pseudo)",
    "full_label": "Full-label FedCLS",
}


def run_one(cf: str, out: Path, method: str, seed: int, rounds: int | None, data_dir: str | None = None) -> dict:
    overrides = {"common_args.random_seed": seed, "train_args.method": "fedcls" if method == "full_label" else method}
    if rounds:
        overrides["train_args.comm_round"] = rounds
    if data_dir:
        overrides["data_args.data_dir"] = data_dir

    def full_label(cfg) -> None:  # every training example is a gold label, on every client
        from fedml_fes.data.federated import load_splits

        cfg.data.gold_labels = len(load_splits(cfg)[0])
        cfg.data.gold_sparsity = 100.0

    return common.run_one(
        cf,
        out / f"{method}-s{seed}",
        overrides,
        full_label if method == "full_label" else None,
        tag=f"{method} s{seed}",
    )


def write_table(out: Path, methods: list[str], seeds: list[int], cf: str) -> str:
    rows = []
    for m in methods:
        finals = []
        for s in seeds:
            p = out / f"{m}-s{s}" / "summary.json"
            if p.is_file():
                summary = json.loads(p.read_text())
                if summary.get("status") == "completed" and summary.get("final") is not None:
                    finals.append(summary["final"])
        mean = statistics.mean(finals) if finals else float("nan")
        std = statistics.stdev(finals) if len(finals) > 1 else 0.0
        rows.append(
            {
                "method": m,
                "label": LABELS[m],
                "mean_acc": mean,
                "std_acc": std,
                "seeds": len(finals),
                "per_seed": " ".join(f"{x:.4f}" for x in finals),
            }
        )
    with (out / "table1.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cfg = load_config(cf)
    lines = [
        f"# Table 1 on {cfg.data.dataset}: {cfg.data.client_num_in_total} clients, "
        f"{cfg.data.gold_labels} gold labels (gamma {cfg.data.gold_sparsity}), model {cfg.model.model}"
        f"{' + MLM head from ' + cfg.model.mlm_from if cfg.model.mlm_from else ''}",
        "",
        f"Final test accuracy (mean ± std over seeds {seeds}; test set of "
        f"{cfg.data.max_test_examples or 'all'} examples). Config: {cf}.",
        "",
        "| method | accuracy | seeds | per seed |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['label']} | {100 * r['mean_acc']:.1f} ± {100 * r['std_acc']:.1f} | {r['seeds']} | {r['per_seed']} |"
        for r in rows
    ]
    text = "\n".join(lines) + "\n"
    (out / "table1.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cf", default="run_configs/agnews_fedfsl.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=None, help="override train_args.comm_round")
    p.add_argument("--out", default="runs/table1")
    p.add_argument("--agnews-dir", default=None, help="AG News in its official CSV layout (data_args.data_dir)")
    p.add_argument("--no-full-label", action="store_true", help="skip the full-label reference")
    opts = p.parse_args(argv)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    methods = list(METHODS) + ([] if opts.no_full_label else ["full_label"])
    try:
        for seed in opts.seeds:
            for m in methods:
                start = time.time()
                summary = run_one(opts.cf, out, m, seed, opts.rounds, opts.agnews_dir)
                print(f"{m} seed {seed}: final acc {summary.get('final')} ({time.time() - start:.0f}s)", flush=True)
    except FesError as e:
        print(f"table1: error: {e}", file=sys.stderr)
        return 1
    print(write_table(out, methods, opts.seeds, opts.cf))
    return 0


if __name__ == "__main__":
    sys.exit(main())

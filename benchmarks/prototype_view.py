"""Would a second view over the Sentence-BERT proxy make pseudo labels more precise? Measured on
finished tuning runs, before building it as a labeler.

    .venv/bin/python benchmarks/prototype_view.py benchmarks/results/labelers/f32_labels_aug/trec/runs/fedfsl-s10 \\
        benchmarks/results/labelers/f32_labels_aug/trec/runs/fedfsl-s11 \\
        benchmarks/results/labelers/f32_labels_aug/bbc_news/runs/fedfsl-s10 --out benchmarks/results/prototype_view.md

The view: the gold labels embedded by the run's filtering proxy (`filter_args.proxy_model`), one
mean per class (a prototype), and each text given the class of its nearest prototype by cosine;
beside it, the 5 nearest gold texts' vote. For each run folder (a finished run with its
clients' `pseudo_labels.json`, the labels of each client's last pass): the view's accuracy on the
test split, and the kept pseudo labels split by whether the view agrees, with the share right in
each part (the evaluator's truth). An agreement filter keeps the first part only. Seeds >= 10
only: this decides whether to build a labeler.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from fedml_fes.config.load import load_run_config
from fedml_fes.errors import FesError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_and_write_table  # noqa: E402

TUNING_SEEDS_FROM = 10
NEIGHBOURS = 5


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def view_row(run: Path) -> dict:
    """One run folder's figures (see the module's docstring)."""
    import torch

    from fedml_fes.pseudo.filtering import ProxyEmbedder
    from fedml_fes.runtime.job import federated_data_for

    torch.set_num_threads(1)
    cfg = load_run_config(run, drop_unknown=True)
    if cfg.common.random_seed < TUNING_SEEDS_FROM:
        raise FesError(f"{run} is seed {cfg.common.random_seed}: this diagnosis reads tuning seeds (>= 10) only")
    data, oracle = federated_data_for(cfg)
    if oracle is None:
        raise FesError(f"{run}: its data has no hidden truth to score pseudo labels against")
    classes = len(data.classes)
    embed = ProxyEmbedder(cfg.filter.proxy_model, max_len=cfg.model.max_seq_length).embed
    gold_texts = [t for c in data.clients for t in c.gold_texts]
    gold = np.asarray([y for c in data.clients for y in c.gold_labels])
    g = embed(gold_texts)
    has = np.array([(gold == k).any() for k in range(classes)])
    protos = _unit(np.stack([g[gold == k].mean(0) if has[k] else np.zeros(g.shape[1]) for k in range(classes)]))

    def nearest(e: np.ndarray) -> np.ndarray:
        return np.where(has, e @ protos.T, -np.inf).argmax(1)

    test = embed(list(data.test.texts))
    truth = np.asarray(data.test.labels)
    near = np.argsort(-(test @ g.T), axis=1)[:, :NEIGHBOURS]
    knn = np.array([np.bincount(gold[row], minlength=classes).argmax() for row in near])
    agree_right = agree = other_right = other = 0
    for c in data.clients:
        path = run / "clients" / str(c.client_id) / "pseudo_labels.json"
        kept = json.loads(path.read_text()) if path.is_file() else {"example_ids": []}
        if not kept["example_ids"]:
            continue
        where = {e: i for i, e in enumerate(c.unlabeled.example_ids)}
        votes = nearest(embed([c.unlabeled.texts[where[e]] for e in kept["example_ids"]]))
        labels = np.asarray(kept["labels"])
        right = labels == np.asarray(oracle.labels_of(kept["example_ids"]))
        same = votes == labels
        agree, agree_right = agree + int(same.sum()), agree_right + int(right[same].sum())
        other, other_right = other + int((~same).sum()), other_right + int(right[~same].sum())
    if agree + other == 0:
        raise FesError(f"{run}: no client holds pseudo labels (clients/<id>/pseudo_labels.json)")
    return {
        "run": f"{cfg.data.dataset} {run.name}",
        "gold": len(gold),
        "prototype_acc": float((nearest(test) == truth).mean()),
        "knn_acc": float((knn == truth).mean()),
        "kept": agree + other,
        "agree": agree,
        "agree_right": agree_right / max(agree, 1),
        "other_right": other_right / max(other, 1),
        "all_right": (agree_right + other_right) / (agree + other),
    }


def table(rows: list[dict]) -> list[str]:
    out = [
        "| run | gold labels | nearest prototype, test acc. | 5 nearest gold texts, test acc. | pseudo labels "
        "(last pass) | the view agrees | right where it agrees | right where not | right, all |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['run']} | {r['gold']} | {100 * r['prototype_acc']:.1f} | {100 * r['knn_acc']:.1f} | {r['kept']} | "
            f"{r['agree']} ({100 * r['agree'] / r['kept']:.0f}%) | {100 * r['agree_right']:.1f} | "
            f"{100 * r['other_right']:.1f} | {100 * r['all_right']:.1f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="finished run folders with their clients' pseudo_labels.json")
    p.add_argument("--out", default=None, help="write the table here (markdown) as well")
    opts = p.parse_args(argv)
    try:
        text = "\n".join(table([view_row(Path(r)) for r in opts.runs]))
    except FesError as e:
        print(f"prototype_view: error: {e}", file=sys.stderr)
        return 1
    print_and_write_table("prototype_view.py", "A second view over the Sentence-BERT proxy", text, opts.out, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())

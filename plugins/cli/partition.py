"""`fedml-fes partition`: build a config's partition and show it, without training anything.

    fedml-fes partition --cf run_configs/data_agnews_paper.yaml [--out DIR] [--fednlp-h5]

Prints the per-client counts (compact for 1,000 clients), how long reading and
partitioning took, and writes `partition.csv` and `partition.png` (heat map of labels per
client) into DIR (default: a new folder under output_dir). `--fednlp-h5` also exports the
data and the partition as FedNLP h5 files in DIR.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from fedml_fes.config import FesConfig, add_set_argument

if TYPE_CHECKING:  # imported where used: every `fedml-fes` command builds this parser
    from fedml_fes.data.federated import FederatedData
    from fedml_fes.data.readers import LabeledTexts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cf", required=True, help="run config YAML (its data_args and random_seed are used)")
    p.add_argument("--out", default=None, help="folder for partition.csv/.png (default: new folder under output_dir)")
    p.add_argument("--rows", type=int, default=10, help="client rows to print when there are many (default 10)")
    p.add_argument(
        "--fednlp-h5",
        action="store_true",
        help="also export <dataset>_data.h5 and <dataset>_partition.h5 in FedNLP's layout",
    )
    add_set_argument(p, "override a config key, e.g. --set data_args.client_num_in_total=1000 (repeatable)")


def _out_dir(cfg: FesConfig, out: str | None) -> Path:
    if out:
        return Path(out)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(cfg.common.output_dir) / f"partition-{cfg.data.dataset}-s{cfg.common.random_seed}-{stamp}"


def export_fednlp(cfg: FesConfig, data: FederatedData, train: LabeledTexts, out: Path) -> tuple[Path, Path]:
    """Write FedNLP h5 files for this partition (train ids = positions, test ids follow)."""
    import numpy as np

    from fedml_fes.data.fednlp_h5 import write_fednlp_data, write_fednlp_partition

    d = cfg.data
    n = len(train)
    data_path = write_fednlp_data(out / f"{d.dataset}_data.h5", train, data.test, d.dataset)
    parts = [
        np.sort(
            np.concatenate(
                [np.asarray(c.gold_example_ids, dtype=np.int64), np.asarray(c.unlabeled.example_ids, dtype=np.int64)]
            )
        )
        for c in data.clients
    ]
    test = [np.asarray(ix, dtype=np.int64) + n for ix in data.client_test]
    params = (
        {"alpha": d.partition_alpha}
        if d.partition_method == "niid_label"
        else {"beta": d.partition_beta}
        if d.partition_method == "niid_quantity"
        else {}
    )
    attrs = {
        "fes_seed": cfg.common.random_seed,
        "fes_gold_labels": d.gold_labels,
        "fes_gold_clients": d.gold_clients,
        "fes_gold_sparsity": d.gold_sparsity,
    }
    part_path = write_fednlp_partition(
        out / f"{d.dataset}_partition.h5",
        data.partition,
        parts,
        test,
        params,
        gold=[np.asarray(c.gold_example_ids, dtype=np.int64) for c in data.clients],
        attrs=attrs,
    )
    return data_path, part_path


def run_partition(cfg: FesConfig, opts: argparse.Namespace) -> int:
    from fedml_fes.data.federated import federate
    from fedml_fes.data.sources import load_source
    from fedml_fes.report.partition_report import count_partition, summary_lines, write_csv, write_heatmap

    t0 = time.perf_counter()
    splits = load_source(cfg)
    t1 = time.perf_counter()
    data, oracle = federate(cfg, splits)
    t2 = time.perf_counter()
    counts = count_partition(data, oracle)
    for line in summary_lines(data, counts, rows=max(1, opts.rows)):
        print(line)
    print(f"time: read {t1 - t0:.2f} s, partition + gold labels {t2 - t1:.3f} s (seed {cfg.common.random_seed})")
    out = _out_dir(cfg, opts.out)
    csv_path = write_csv(counts, out / "partition.csv")
    title = (
        f"{data.dataset}: {data.partition}, {int(counts.gold_sizes.sum())} gold labels (seed {cfg.common.random_seed})"
    )
    png_path = write_heatmap(counts, out / "partition.png", title)
    print(f"wrote {csv_path} and {png_path}")
    if opts.fednlp_h5:
        paths = export_fednlp(cfg, data, splits.train, out)
        print(f"wrote FedNLP files {paths[0]} and {paths[1]} (partition '{data.partition}')")
    return 0

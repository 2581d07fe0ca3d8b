"""`fedml-fes partition`: per-client counts, compact for 1,000 clients, CSV and PNG heat map."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import build_federated_data
from fedml_fes.report.partition_report import count_partition, skew_stats, summary_lines, write_heatmap

from .conftest import write_config

CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]


def test_partition_command_prints_counts_and_writes_csv_png_h5(tmp_path):
    cf = write_config(
        tmp_path / "c.yaml",
        {"common_args": {"output_dir": str(tmp_path / "runs")}, "data_args": {"client_num_in_total": 12}},
    )
    out = subprocess.run(
        [*CLI, "partition", "--cf", str(cf), "--out", str(tmp_path / "p"), "--fednlp-h5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "bbc_news: 1699 train examples over 12 clients (niid_label_clients=12_alpha=1.0)" in text
    assert "gold labels: 64 on" in text and "time: read" in text
    header = next(line for line in text.splitlines() if line.split()[:2] == ["client", "total"])
    assert "business" in header and "tech" in header
    rows = list(csv.DictReader((tmp_path / "p" / "partition.csv").open()))
    assert len(rows) == 12 and sum(int(r["gold"]) for r in rows) == 64
    assert sum(int(r["total"]) for r in rows) == 1699
    assert all(int(r["total"]) == int(r["gold"]) + int(r["unlabeled"]) for r in rows)
    assert all(
        sum(int(r[c]) for c in ("business", "entertainment", "politics", "sports", "tech")) == int(r["total"])
        for r in rows
    )
    png = (tmp_path / "p" / "partition.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert (tmp_path / "p" / "bbc_news_data.h5").is_file() and (tmp_path / "p" / "bbc_news_partition.h5").is_file()
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "bbc_news_data.h5",
        "bbc_news_partition.h5",
        "partition.csv",
        "partition.png",
    ]  # no temp files left


@pytest.mark.slow
def test_partition_command_defaults_to_a_new_folder_and_reports_errors(tmp_path):
    cf = write_config(
        tmp_path / "c.yaml",
        {"common_args": {"output_dir": str(tmp_path / "runs")}, "data_args": {"client_num_in_total": 4}},
    )
    out = subprocess.run([*CLI, "partition", "--cf", str(cf)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("partition-bbc_news-s0-")
    bad = subprocess.run(
        [*CLI, "partition", "--cf", str(cf), "--set", "data_args.partition_beta=0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 1 and lines == ["fedml-fes: error: data_args.partition_beta must be > 0, got 0.0"]


def _thousand_clients(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"t": f"text {i}", "y": f"c{int(k)}"} for i, k in enumerate(rng.integers(0, 10, 20_000))]
    (tmp_path / "big.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return config_from_dict(
        {
            "data_args": {
                "dataset": "custom",
                "train_file": str(tmp_path / "big.jsonl"),
                "text_columns": ["t"],
                "label_column": "y",
                "client_num_in_total": 1000,
                "partition_alpha": 1.0,
                "gold_labels": 64,
            }
        }
    )


def test_thousand_clients_report_stays_compact(tmp_path):
    data, oracle = build_federated_data(_thousand_clients(tmp_path))
    counts = count_partition(data, oracle)
    lines = summary_lines(data, counts, rows=10)
    assert len(lines) < 40 and any("more clients in the CSV" in line for line in lines)
    assert counts.total.sum() == sum(c.num_gold + len(c.unlabeled) for c in data.clients) > 15_000
    assert counts.gold.sum() == 64
    write_heatmap(counts, tmp_path / "h.png", "1000 clients")
    assert (tmp_path / "h.png").stat().st_size > 10_000


def test_skew_statistics_separate_iid_from_skewed():
    iid, _ = build_federated_data(config_from_dict({"data_args": {"partition_method": "uniform"}}))
    skewed, oracle = build_federated_data(config_from_dict({"data_args": {"partition_alpha": 0.1}}))
    s_iid = skew_stats(count_partition(iid, oracle))
    s_skew = skew_stats(count_partition(skewed, oracle))
    assert s_iid["tv_distance"] < 0.15 < 0.4 < s_skew["tv_distance"]
    assert s_skew["dominant_share"] > s_iid["dominant_share"] + 0.3


@pytest.mark.parametrize("sub", [["partition"]])
def test_partition_help(sub):
    out = subprocess.run([*CLI, *sub, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--fednlp-h5" in out.stdout and "--out" in out.stdout

"""The fidelity benchmark: CSV, report and done-checks from run folders; the harness end to end."""

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from fedml_fes.config import config_from_dict, load_config
from fedml_fes.errors import FesError
from fedml_fes.runtime import checkpoint
from fedml_fes_plugins.bench import fidelity as fid

from .conftest import hold_lock, load_benchmark_script, small_config

REPO = Path(__file__).resolve().parents[1]


# ---- synthetic rows: the checks pass, and each can fail ----------------------------------------


def _rows(
    acc: dict,
    bytes_up: dict | None = None,
    majority: float = 0.25,
    datasets=("agnews", "bbc_news", "trec"),
    seeds=(0, 1, 2),
) -> list[dict]:
    """acc: method -> accuracy (same on every dataset unless a dict per dataset), +0.01 * seed."""
    bytes_up = bytes_up or {"fedcls": 9e9, "prompt_only": 9e9, "pseudo_only": 9e9, "fedfsl": 9e9, "fes": 9e5}
    rows = []
    for d in datasets:
        for s in seeds:
            for m, a in acc.items():
                a = a[d] if isinstance(a, dict) else a
                cfg = {
                    "data_args": {"dataset": d, "client_num_in_total": 20},
                    "prompt_args": {"pattern_id": 1},
                    "train_args": {"method": m},
                    "common_args": {"random_seed": s},
                }
                rows.append(
                    {
                        "dataset": d,
                        "seed": s,
                        "method": m,
                        "accuracy": a + 0.01 * s,
                        "majority_rate": majority,
                        "pseudo_labels": 500 if m in ("fedfsl", "fes") else 0,
                        "bytes_up": int(bytes_up[m]),
                        "emulated_hours": 0.5 if m != "fes" else 0.001,
                        "_config": cfg,
                        "_run_dir": f"/x/{d}/{m}-s{s}",
                        "_wall_s": 240.0,
                    }
                )
    return rows


GOOD = {"fedcls": 0.50, "prompt_only": 0.60, "pseudo_only": 0.55, "fedfsl": 0.70, "fes": 0.695}


def _met(rows) -> dict[str, bool]:
    return {c.key: c.met for c in fid.checks(rows)}


def test_checks_met():
    assert _met(_rows(GOOD)) == {"a": True, "b": True, "c": True, "d": True, "e": True, "f": True}


def test_check_a_fails_when_fes_is_more_than_a_point_below_fedfsl_on_one_dataset():
    acc = {**GOOD, "fes": {"agnews": 0.695, "bbc_news": 0.70, "trec": 0.685}}
    result = fid.checks(_rows(acc))
    assert [c.met for c in result] == [False, True, True, True, True, True]
    assert any("trec: FeS 0.6950 vs FedFSL 0.7100" in line and "NOT met" in line for line in result[0].details)


def test_check_b_fails_at_or_below_the_majority_rate():
    assert _met(_rows({**GOOD, "pseudo_only": 0.24}))["b"] is False  # seeds 0.24, 0.25, 0.26: mean 0.25
    assert _met(_rows(GOOD, majority=0.66))["b"] is False  # FedCLS 0.51 is below


def test_check_c_needs_the_ordering_on_two_datasets():
    one = {**GOOD, "prompt_only": {"agnews": 0.60, "bbc_news": 0.45, "trec": 0.75}}  # holds on agnews only
    result = {c.key: c for c in fid.checks(_rows(one))}
    assert result["c"].met is False and result["c"].details[0] == "holds on 1 of 3 datasets"
    two = {**GOOD, "prompt_only": {"agnews": 0.60, "bbc_news": 0.60, "trec": 0.75}}
    assert _met(_rows(two))["c"] is True


def test_check_d_fails_above_a_thousandth_of_fedfsl_traffic():
    assert _met(_rows(GOOD, {**{m: 1e9 for m in GOOD}, "fes": 1.01e6}))["d"] is False
    assert _met(_rows(GOOD, {**{m: 1e9 for m in GOOD}, "fes": 1e6}))["d"] is True


def test_missing_methods_or_datasets_fail_the_checks():
    partial = [r for r in _rows(GOOD) if r["method"] != "fes"]
    met = _met(partial)
    assert met["a"] is False and met["d"] is False and met["b"] is False and met["c"] is True
    assert any("no completed run of FeS" in line for line in fid.checks(partial)[0].details)
    assert _met(_rows(GOOD, datasets=("bbc_news",)))["c"] is False  # one dataset cannot hold on two
    assert not any(_met([]).values())


def test_csv_has_exactly_the_columns_and_one_row_per_run(tmp_path):
    rows = _rows(GOOD)
    path = fid.write_csv(rows, tmp_path / "r" / "fidelity.csv")
    read = list(csv.DictReader(path.open()))
    assert list(read[0]) == [
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
    ]
    assert len(read) == 45 and read[0]["dataset"] == "agnews" and float(read[0]["accuracy"]) == 0.5


def test_markdown_has_tables_checks_command_and_date(tmp_path):
    acc = {**GOOD, "fes": {"agnews": 0.60, "bbc_news": 0.70, "trec": 0.70}}
    text = fid.render(
        _rows(acc),
        "fedml-fes bench --suite fidelity --jobs 2",
        "2026-11-30 10:00",
        tmp_path,
        {"config": "run_configs/fidelity.yaml"},
    )
    assert "`fedml-fes bench --suite fidelity --jobs 2` on 2026-11-30 10:00" in text
    assert "- (a) on every dataset FeS mean accuracy >= FedFSL mean - 0.01: **NOT met**" in text
    assert "- (b) on every dataset every method's mean accuracy > the majority-class rate: **met**" in text
    assert "- (d) FeS bytes_up <= FedFSL bytes_up / 1,000 (per dataset, means over seeds): **met**" in text
    for title in ("## AG News (`agnews`)", "## BBC News (`bbc_news`)", "## TREC-6 (`trec`)"):
        assert title in text
    assert "| FedCLS | 51.0 ± 1.0 | 50.0 | 51.0 | 52.0 |" in text
    assert "| majority class | 25.0 | 25.0 | 25.0 | 25.0 |" in text
    assert "One shared config across all runs: yes" in text and "Completed runs: 45" in text
    assert "Run time: 3.0 h over these runs" in text  # 45 runs of 4 minutes


def test_the_mean_table_lists_a_method_beyond_the_five_once(tmp_path):
    """Ablations (`--methods fes_no_cp fedfsl_bias`) on three datasets: one row each, not one per dataset."""
    rows = _rows({"fes_no_cp": 0.6, "fedfsl_bias": 0.5}, bytes_up={"fes_no_cp": 9e9, "fedfsl_bias": 9e6})
    text = fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {})
    table = text.split("## Mean accuracy (%)")[1].split("## Done-checks")[0]
    assert table.count("| fes_no_cp |") == 1 and table.count("| FedFSL-BIAS |") == 1, table


def test_a_held_out_dataset_runs_only_when_named_and_the_report_says_so(tmp_path):
    """movie_sentiment tuned nothing: not in the default matrix, planned with its own data keys
    when named, and its report counts its own matrix and names it held out."""
    assert "movie_sentiment" not in fid.FidelityOptions().datasets
    o = fid.FidelityOptions(
        cf=str(REPO / "run_configs" / "fidelity.yaml"),
        out=str(tmp_path / "out"),
        datasets=["movie_sentiment"],
        methods=["fes"],
        seeds=[0],
    )
    fid.check_options(o)
    from fedml_fes_plugins.bench.config import run_config

    plan = fid.plans(o)["movie_sentiment"]
    cfg = run_config(plan, "fes", 0)
    assert (cfg.data.dataset, cfg.data.client_num_in_total, cfg.prompt.pattern_id) == ("movie_sentiment", 100, 0)
    from fedml_fes.prompt.pvp import get_pvp

    assert get_pvp("movie_sentiment").pattern(0, causal=True) == "{text_a}\nAll in all, the movie was {mask}"
    text = fid.render(_rows(GOOD, datasets=("movie_sentiment",)), "x", "2026-11-30 10:00", tmp_path, {})
    assert "Completed runs: 15 (the full matrix is 18: 1 datasets" in text
    assert (
        "Held out of all tuning (nothing in the shared config was chosen on it, on any seed): movie_sentiment" in text
    )
    assert "## Movie sentiment (`movie_sentiment`)" in text
    both = fid.render(_rows(GOOD, datasets=("bbc_news", "movie_sentiment")), "x", "2026-11-30 10:00", tmp_path, {})
    assert "the full matrix is 72: 4 datasets" in both


def test_gold_labels_per_class_are_counted_cached_and_reported(tmp_path):
    cfg = config_from_dict(small_config(tmp_path, "unused"))
    run_dir = tmp_path / "bbc_news" / "runs" / "fes-s0"
    run_dir.mkdir(parents=True)
    gold = fid.gold_classes(run_dir, cfg)
    assert gold["classes"] == ["business", "entertainment", "politics", "sports", "tech"]
    assert sum(gold["counts"]) == cfg.data.gold_labels == 32
    assert json.loads((run_dir / "gold_classes.json").read_text()) == gold  # cached for the next report
    rows = _rows(GOOD, datasets=("bbc_news",), seeds=(0,))
    for r in rows:
        r["_gold"] = {"classes": ["a", "b"], "counts": [47, 1]}
    text = fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {})
    assert (
        "Gold labels per class (each seed's few-shot set, before FeS's validation hold-out): seed 0: a 47, b 1." in text
    )


def test_the_report_names_the_mlm_head_of_the_runs_that_read_one(tmp_path):
    rows = _rows(GOOD, datasets=("bbc_news",), seeds=(0,))
    for r in rows:  # FedCLS comes first and reads no MLM: its config may not name the new key
        mlm = {"mlm_from": "run_configs/mlm.yaml"} | ({} if r["method"] == "fedcls" else {"mlm_on_job_data": True})
        r["_config"] = {**r["_config"], "model_args": {"model": "m", **mlm}}
    assert rows[0]["method"] == "fedcls"
    text = fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {})
    assert "Model m + MLM head: FedBERT build of run_configs/mlm.yaml on the job's own clients' text," in text


def test_shared_config_check_names_a_per_dataset_difference():
    rows = _rows(GOOD)
    assert fid.shared_config_check(rows) == []
    rows[3]["_config"] = {**rows[3]["_config"], "train_args": {"method": "fes", "learning_rate": 0.001}}
    assert fid.shared_config_check(rows) == ["train_args.learning_rate"]


def test_shared_config_check_reads_project_files_the_same_from_any_checkout():
    """Runs made from a worktree record absolute paths to the same project files."""
    rows = _rows(GOOD)
    for i, r in enumerate(rows):
        where = "run_configs/mlm.yaml" if i % 2 else "/elsewhere/clone/run_configs/mlm.yaml"
        r["_config"] = {**r["_config"], "model_args": {"mlm_from": where}}
    assert fid.shared_config_check(rows) == []
    rows[0]["_config"] = {**rows[0]["_config"], "model_args": {"mlm_from": "/elsewhere/run_configs/other.yaml"}}
    assert rows[0]["method"] == "fedcls" and fid.shared_config_check(rows) == []  # a head classifier reads no MLM
    rows[1]["_config"] = {**rows[1]["_config"], "model_args": {"mlm_from": "/elsewhere/run_configs/other.yaml"}}
    assert rows[1]["method"] == "prompt_only" and fid.shared_config_check(rows) == ["model_args.mlm_from"]


def test_shared_config_check_compares_a_section_among_the_methods_that_read_it():
    rows = _rows(GOOD)
    for r in rows:  # FeS's bias-only lr differs from what the full-tuning methods' configs say
        lr = 0.01 if r["method"] == "fes" else 0.001
        r["_config"] = {**r["_config"], "tuning_args": {"bias_learning_rate": lr}}
    assert fid.shared_config_check(rows) == []
    fes = [r for r in rows if r["method"] == "fes"]
    fes[0]["_config"] = {**fes[0]["_config"], "tuning_args": {"bias_learning_rate": 0.02}}
    assert fid.shared_config_check(rows) == ["tuning_args.bias_learning_rate"]


# ---- the shared config and the per-dataset plans ------------------------------------------------


def test_fidelity_config_is_one_cheap_config_for_every_method_and_dataset(tmp_path):
    from fedml_fes.prompt.pvp import get_pvp
    from fedml_fes_plugins.bench.config import run_config

    cfg = load_config(REPO / "run_configs" / "fidelity.yaml")
    assert cfg.train.comm_round == 10 and cfg.train.client_num_per_round == 5
    assert cfg.train.frequency_of_the_test == 2  # every other round: time to accuracy (Table 4)
    assert cfg.pseudo.per_pass_fraction == 0.083 and cfg.pseudo.labeler in ("paper", "contextual", "aligned")
    # the paper's labeling as a row of its own: `fedfsl@paper` drops what the shared config adds to it
    assert cfg.pseudo.sample_by_labels and cfg.pseudo.augment_word_dropout > 0 and cfg.pseudo.gold_every_round
    small = load_config(REPO / "run_configs" / "fidelity_small_pools.yaml")  # the earlier regime's 45 runs
    assert small.pseudo.per_pass == 100 and small.pseudo.per_pass_fraction == 0
    assert cfg.model.max_seq_length == 64 and cfg.data.max_test_examples == 300
    assert cfg.model.model == "offline:smollm2-135m" and not cfg.model.mlm_from  # a real LM, no head to build
    agnews = tmp_path / "agnews"
    agnews.mkdir()
    o = fid.FidelityOptions(
        cf=str(REPO / "run_configs" / "fidelity.yaml"), out=str(tmp_path / "out"), agnews_dir=str(agnews), jobs=2
    )
    plans = fid.plans(o)
    assert list(plans) == ["agnews", "bbc_news", "trec"]

    def flat(c):
        return {f"{s}.{k}": json.dumps(v, sort_keys=True) for s, vals in c.to_dict().items() for k, v in vals.items()}

    configs = {(d, m, s): run_config(p, m, s) for d, p in plans.items() for m, s in p.run_names()}
    assert len(configs) == 54
    base = flat(configs[("bbc_news", "fedcls", 0)])
    for (d, m, s), c in configs.items():
        other = flat(c)
        assert {k for k in base if base[k] != other[k]} <= fid.VARYING_KEYS, (d, m, s)
        assert c.train.method == m and c.common.random_seed == s and c.data.dataset == d
        assert c.common.cache_dir == str(tmp_path / "out" / "cache") and c.common.torch_threads == 1
        get_pvp(d).pattern(c.prompt.pattern_id)  # the built-in PVP has that pattern
    assert configs[("agnews", "fes", 0)].data.data_dir == str(agnews)
    paper = run_config(plans["bbc_news"], "fedfsl@paper", 0)
    assert paper.train.method == "fedfsl" and paper.pseudo.labeler == "paper"
    assert not paper.pseudo.sample_by_labels and paper.pseudo.augment_word_dropout == 0
    assert not paper.pseudo.gold_every_round
    contextual = run_config(plans["bbc_news"], "fedfsl@contextual", 0)
    assert contextual.pseudo.labeler == "contextual" and contextual.pseudo.sample_by_labels  # the labeler alone
    assert {d: configs[(d, "fes", 0)].data.client_num_in_total for d in plans} == {
        "agnews": 100,
        "bbc_news": 20,
        "trec": 100,
    }


def test_bad_fidelity_options_are_one_line_errors(tmp_path, capsys):
    from fedml_fes_plugins.cli.main import main

    out = str(tmp_path / "f")
    assert main(["bench", "--suite", "fidelity", "--out", out]) == 1
    assert "dataset agnews needs --agnews-dir" in capsys.readouterr().err
    assert main(["bench", "--suite", "fidelity", "--agnews-dir", str(tmp_path), "--out", out]) == 1
    assert "has no train.csv" in capsys.readouterr().err
    assert main(["bench", "--suite", "fidelity", "--datasets", "imdb", "--out", out]) == 1
    assert "unknown fidelity dataset 'imdb'" in capsys.readouterr().err
    assert main(["bench", "--suite", "fidelity", "--preset", "smoke", "--out", out]) == 1
    assert "--preset is a --suite bench option" in capsys.readouterr().err
    assert main(["bench", "--preset", "smoke", "--datasets", "trec", "--out", out]) == 1
    assert "--datasets belongs to --suite fidelity" in capsys.readouterr().err
    assert main(["bench", "--suite", "fidelity", "--report-only", "--out", out]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedml-fes: error: no completed fidelity run") and "\n" not in err
    assert main(["bench", "--suite", "fidelity", "--datasets", "trec", "--jobs", "0", "--out", out]) == 1
    assert "--jobs must be >= 1" in capsys.readouterr().err


def test_command_line_is_rebuilt_from_the_options():
    import argparse

    p = argparse.ArgumentParser()
    fid.add_arguments(p)
    opts = p.parse_args(["--datasets", "bbc_news", "--seeds", "0", "--set", "train_args.comm_round=1", "--jobs", "2"])
    assert (
        fid.command_line("fedml-fes bench --suite fidelity", opts)
        == "fedml-fes bench --suite fidelity --datasets bbc_news --seeds 0 --jobs 2 --set train_args.comm_round=1"
    )


# ---- a run folder's row ---------------------------------------------------------------------------


def _fake_run_dir(root: Path, tiny_model_dir: str, method: str = "fes", status: str = "completed") -> Path:
    raw = small_config(
        root, tiny_model_dir, train_args={"method": method, "comm_round": 2}, data_args={"max_test_examples": 40}
    )
    cfg = config_from_dict(raw)
    rd = root / "bbc_news" / "runs" / f"{method}-s0"
    rd.mkdir(parents=True)
    (rd / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    (rd / "summary.json").write_text(json.dumps({"status": status, "final": 0.625, "primary_metric": "test_acc"}))
    (rd / "metrics.csv").write_text("round,test_acc,pseudo_total,bytes_up\n0,,10,1000\n1,0.625,30,3000\n")
    with (rd / "client_costs.csv").open("w", newline="") as f:
        w = csv.DictWriter(
            f,
            fieldnames=[
                "round",
                "phase",
                "client_id",
                "accepted",
                "fwd_flops",
                "bwd_flops",
                "filter_flops",
                "encoder_calls",
                "bytes_down",
                "bytes_up",
                "compute_s",
            ],
        )
        w.writeheader()
        for r in (0, 1):
            for c, flops in ((0, 1.07e12), (1, 2.14e12)):  # the slower client sets the round's pace
                w.writerow(
                    {
                        "round": r,
                        "phase": "train",
                        "client_id": c,
                        "accepted": 1,
                        "fwd_flops": flops,
                        "bwd_flops": 0,
                        "filter_flops": 0,
                        "encoder_calls": 0,
                        "bytes_down": 1e6,
                        "bytes_up": 1e6,
                        "compute_s": 1.0,
                    }
                )
    return rd


def test_run_row_reads_a_run_folder(tmp_path, tiny_model_dir):
    from fedml_fes.cost.accounting import round_costs
    from fedml_fes.cost.network import Network
    from fedml_fes.cost.profiles import load_profile
    from fedml_fes.report.runs import load_run

    rd = _fake_run_dir(tmp_path, tiny_model_dir)
    row = fid.run_row(rd)
    assert (row["dataset"], row["seed"], row["method"], row["accuracy"]) == ("bbc_news", 0, "fes", 0.625)
    assert row["pseudo_labels"] == 30 and row["bytes_up"] == 4000
    tx2 = load_profile("jetson_tx2")
    expected = sum(c.time_s for c in round_costs(load_run(rd).tasks, tx2, Network(1.0, 1.0))) / 3600
    # two rounds, each: the slower client's 2.14e12 FLOPs on the TX2 + 1 MB down + 1 MB up at 1 MB/s
    assert row["emulated_hours"] == pytest.approx(expected)
    assert expected == pytest.approx(2 * (2.14e12 / tx2.flops_per_s + 2.0) / 3600)
    # the majority-class rate of the run's own test set (40 stratified BBC News examples), cached beside it
    info = json.loads((rd / "test_classes.json").read_text())
    assert 35 <= info["size"] <= 40 and row["majority_rate"] == pytest.approx(max(info["counts"]) / info["size"])
    assert 0.2 <= row["majority_rate"] < 0.3
    # an unfinished run is no row; the report is built from the folders only
    _fake_run_dir(tmp_path, tiny_model_dir, method="fedcls", status="interrupted")
    assert [r["method"] for r in fid.collect_rows(tmp_path)] == ["fes"]
    md = fid.report(fid.FidelityOptions(out=str(tmp_path), results=str(tmp_path / "res"), command="x"))
    rows = list(csv.DictReader((tmp_path / "res" / "fidelity.csv").open()))
    assert len(rows) == 1 and rows[0]["bytes_up"] == "4000"
    assert "| FeS | 62.5 ± 0.0 | 62.5 | 0 |" not in md.read_text()  # pseudo labels then bytes
    assert "| FeS | 62.5 ± 0.0 | 62.5 | 30 | - | 4,000 |" in md.read_text()  # no pass: no precision


# ---- end to end on a tiny setting ------------------------------------------------------------------


@pytest.mark.slow
def test_fidelity_harness_end_to_end_and_resumes(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """bbc_news, seed 0, FedCLS and FeS, 2 rounds on the tiny BERT: two at once, then nothing to redo."""
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"comm_round": 2, "client_num_per_round": 2, "frequency_of_the_test": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "max_train_examples": 160, "max_test_examples": 40},
        pseudo_args={"start_round": 1, "label_clients": 2, "per_pass": 8},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        filter_args={"method": "random"},  # no proxy model to load: this tests the harness
        pacing_args={"mode": "static", "f": 1, "n": 2, "k": 20},
        cost_args={"devices": ["jetson_tx2"]},
    )
    mlm = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedbert_mlm", "comm_round": 1, "client_num_per_round": 2},
        data_args={"client_num_in_total": 4, "max_train_examples": 80, "max_test_examples": 20},
        mlm_args={"local_steps": 1, "heldout_texts": 20},
    )
    raw["model_args"]["mlm_from"] = str(tmp_path / "tiny_mlm.yaml")
    (tmp_path / "tiny_mlm.yaml").write_text(yaml.safe_dump(mlm))
    cf = tmp_path / "tiny_fidelity.yaml"
    cf.write_text(yaml.safe_dump(raw))
    out, res = tmp_path / "fid", tmp_path / "results"
    argv = [
        "--cf",
        str(cf),
        "--datasets",
        "bbc_news",
        "--seeds",
        "0",
        "--methods",
        "fedcls",
        "fes",
        "--out",
        str(out),
        "--results",
        str(res),
        "--set",
        "data_args.client_num_in_total=8",
    ]
    from fedml_fes_plugins.cli.main import main

    assert main(["bench", "--suite", "fidelity", *argv, "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "2 runs, 0 already complete, 2 to do" in text and "(2 at a time)" in text
    # the MLM head is built once, by the parent, into the benchmark's one cache, before the runs start
    assert text.count("building the MLM head first") == 1
    assert text.index("building the MLM head first") < text.index("[start 1/2]")
    builds = list((out / "cache" / "mlm").iterdir())
    assert len(builds) == 1 and (builds[0] / "fes_mlm.json").is_file()
    for m in ("fedcls", "fes"):
        rd = out / "bbc_news" / "runs" / f"{m}-s0"
        assert json.loads((rd / "summary.json").read_text())["status"] == "completed"
        assert yaml.safe_load((rd / "config.yaml").read_text())["common_args"]["torch_threads"] == 1
    rows = list(csv.DictReader((res / "fidelity.csv").open()))
    assert list(rows[0]) == list(fid.COLUMNS) and [r["method"] for r in rows] == ["zero_shot", "fedcls", "fes"]
    for r in rows:
        assert 0 <= float(r["accuracy"]) <= 1 and 0 < float(r["majority_rate"]) < 1
        trained = r["method"] != "zero_shot"  # the untrained model's row: no upload, no time
        assert (int(r["bytes_up"]) > 0 and float(r["emulated_hours"]) > 0) == trained
    zero, fes_row = rows[0], rows[2]
    assert float(zero["accuracy"]) == float(fes_row["start_accuracy"])  # the prompt run's own start
    assert fes_row["labeler"] == "paper" and rows[1]["labeler"] == ""  # FedCLS does not pseudo-label
    fes = next(r for r in rows if r["method"] == "fes")
    assert int(fes["pseudo_labels"]) > 0 and int(next(r for r in rows if r["method"] == "fedcls")["pseudo_labels"]) == 0
    assert "## Done-checks" in (res / "fidelity.md").read_text()

    # the standalone script, again: both runs are finished, nothing runs
    stamp = (out / "bbc_news" / "runs" / "fes-s0" / "summary.json").stat().st_mtime_ns
    script = load_benchmark_script("fidelity")
    assert script.main(argv) == 0
    assert "2 runs, 2 already complete, 0 to do" in capsys.readouterr().out
    assert (out / "bbc_news" / "runs" / "fes-s0" / "summary.json").stat().st_mtime_ns == stamp

    # a finished run's checkpoint is dropped (only an unfinished run resumes); an interrupted
    # run without one is set aside (kept) and redone; one with a checkpoint continues from it,
    # to the same rows; report-only trains nothing
    rd = out / "bbc_news" / "runs" / "fedcls-s0"
    assert not list(out.glob("bbc_news/runs/*/checkpoint*"))
    rows_before = (rd / "metrics.csv").read_text()
    summary = rd / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "interrupted"}))
    monkeypatch.setattr(checkpoint, "drop_checkpoint", lambda run_dir: None)  # as a stop would leave it
    assert script.main(argv) == 0
    text = capsys.readouterr().out
    assert "1 to do" in text and "previous attempt was interrupted" in text
    assert len(list((out / "bbc_news" / "runs" / ".partial").iterdir())) == 1
    assert _results(rd / "metrics.csv") == _results_text(rows_before) and (rd / "checkpoint.pt").is_file()
    rows_before = (rd / "metrics.csv").read_text()  # the redone run's, wall times included
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "interrupted"}))
    assert script.main(argv) == 0
    text = capsys.readouterr().out
    assert "1 to do" in text and "fedcls s0: continuing after round" in text
    assert (rd / "metrics.csv").read_text() == rows_before
    assert len(list((out / "bbc_news" / "runs" / ".partial").iterdir())) == 1
    assert json.loads(summary.read_text())["status"] == "completed"
    assert script.main([*argv, "--report-only"]) == 0
    assert "to do" not in capsys.readouterr().out
    meta = json.loads((out / "fidelity.json").read_text())
    assert len(meta["commands"]) == 4  # report-only runs nothing and logs nothing

    # a changed shared config does not mix with finished runs
    with pytest.raises(FesError, match="different config .*train_args.learning_rate"):
        fid.pending_runs(
            fid.FidelityOptions(
                cf=str(cf),
                out=str(out),
                datasets=["bbc_news"],
                seeds=[0],
                methods=["fedcls"],
                overrides={"data_args.client_num_in_total": 8, "train_args.learning_rate": 0.01},
            )
        )


def _results_text(text: str) -> list[dict[str, str]]:
    """metrics.csv's rows without its wall-clock columns (a redone run computes the same numbers
    in other seconds)."""
    return [{k: v for k, v in r.items() if not k.endswith(("_s", "_s_max"))} for r in csv.DictReader(text.splitlines())]


def _results(path: Path) -> list[dict[str, str]]:
    return _results_text(path.read_text())


def test_check_a_shows_the_gap_seed_by_seed():
    def cell(per_seed):
        return fid.Cell(
            per_seed=per_seed,
            mean=sum(per_seed.values()) / len(per_seed),
            std=0.0,
            bytes_up=1.0,
            pseudo_labels=0.0,
            hours=1.0,
        )

    fes, fsl = cell({0: 0.70, 1: 0.80, 2: 0.60}), cell({0: 0.75, 1: 0.80, 2: 0.50})
    assert fid.paired_difference(fes, fsl) == "per seed -5.0, +0.0, +10.0 points, mean +1.7 ± 7.6"
    assert fid.paired_difference(cell({3: 0.5}), fsl) == ""


# ---- your own dataset: --dataset-file -------------------------------------------------------------


def _dataset_file(tmp_path: Path, name: str = "my_news", **sections) -> Path:
    raw = {
        "data_args": {
            "dataset": "custom",
            "train_file": "data/news.csv",
            "text_columns": ["text"],
            "label_column": "label",
            "client_num_in_total": 10,
        },
        "prompt_args": {
            "pattern": "{mask} News: {text_a}",
            "verbalizer": {
                "business": "business",
                "entertainment": "entertainment",
                "politics": "politics",
                "sports": "sports",
                "tech": "technology",
            },
        },
    }
    for sec, values in sections.items():
        raw.setdefault(sec, {}).update(values)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_dataset_file_sets_only_the_data_and_its_pvp(tmp_path):
    """Its data_args and prompt_args become the dataset's keys (paths from the file's folder), the
    shared config keeps everything else, and it alone is planned when no --datasets is named."""
    from fedml_fes_plugins.bench.config import run_config

    name, keys = fid.read_dataset_file(_dataset_file(tmp_path))
    assert name == "my_news" and keys["data_args.train_file"] == str(tmp_path / "data" / "news.csv")
    assert keys["prompt_args.pattern_id"] == 0  # not the shared config's (BBC News's) pattern id
    assert set(keys) <= fid.VARYING_KEYS
    o = fid.FidelityOptions(
        cf=str(REPO / "run_configs" / "fidelity.yaml"),
        out=str(tmp_path / "out"),
        datasets=[],
        dataset_files=[str(tmp_path / "my_news.yaml")],
        methods=["fes"],
        seeds=[0],
    )
    fid.check_options(o)
    plans = fid.plans(o)
    assert list(plans) == ["my_news"]
    cfg, shared = run_config(plans["my_news"], "fes", 0), load_config(REPO / "run_configs" / "fidelity.yaml")
    assert (cfg.data.dataset, cfg.data.client_num_in_total, cfg.prompt.pattern) == (
        "custom",
        10,
        "{mask} News: {text_a}",
    )
    assert (cfg.data.gold_labels, cfg.data.gold_sparsity, cfg.train.comm_round) == (
        shared.data.gold_labels,
        shared.data.gold_sparsity,
        shared.train.comm_round,
    )

    import argparse

    p = argparse.ArgumentParser()
    fid.add_arguments(p)
    opts = p.parse_args(["--dataset-file", str(tmp_path / "my_news.yaml")])
    assert fid.options_from(opts, "x").datasets == []  # alone: only the file's dataset
    opts = p.parse_args(["--dataset-file", str(tmp_path / "my_news.yaml"), "--datasets", "trec"])
    assert fid.options_from(opts, "x").datasets == ["trec"]
    assert "--dataset-file " + str(tmp_path / "my_news.yaml") in fid.command_line("x", opts)


@pytest.mark.parametrize(
    "sections, message",
    [
        ({"data_args": {"gold_labels": 640}}, "data_args.gold_labels is shared by every dataset"),
        ({"prompt_args": {"train_class_bias": False}}, "prompt_args.train_class_bias is shared by every dataset"),
        ({"train_args": {"comm_round": 50}}, "section 'train_args' belongs to the shared config"),
        ({"data_args": {"dataset": None}}, "data_args.dataset is missing"),
    ],
)
def test_a_dataset_file_that_reaches_beyond_its_data_is_refused_in_one_line(tmp_path, capsys, sections, message):
    path = _dataset_file(tmp_path, **sections)
    if sections.get("data_args", {}).get("dataset", "x") is None:
        raw = yaml.safe_load(path.read_text())
        del raw["data_args"]["dataset"]
        path.write_text(yaml.safe_dump(raw))
    from fedml_fes_plugins.cli.main import main

    assert main(["bench", "--suite", "fidelity", "--dataset-file", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_dataset_file_names_are_checked(tmp_path):
    with pytest.raises(FesError, match="'trec' is a built-in dataset's"):
        fid.read_dataset_file(_dataset_file(tmp_path, name="trec"))
    with pytest.raises(FesError, match="expected a .yaml file"):
        fid.read_dataset_file(tmp_path / "news.csv")
    (tmp_path / "b").mkdir()
    o = fid.FidelityOptions(
        datasets=[], dataset_files=[str(_dataset_file(tmp_path)), str(_dataset_file(tmp_path / "b"))]
    )
    with pytest.raises(FesError, match="two datasets are named 'my_news'"):
        fid.dataset_sources(o)
    with pytest.raises(FesError, match="no dataset to run"):
        fid.check_options(fid.FidelityOptions(datasets=[]))


def test_the_report_names_a_dataset_file_as_held_out_and_shows_its_pattern(tmp_path):
    rows = _rows(GOOD, datasets=("bbc_news", "my_news"))
    for r in rows:
        if r["dataset"] == "my_news":
            r["_config"]["data_args"].update({"dataset": "custom", "train_file": "/data/news.csv"})
            r["_config"]["prompt_args"] = {"pattern": "{mask} News: {text_a}", "pattern_id": 0}
    assert fid.shared_config_check(rows) == []
    text = fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {})
    assert "Held out of all tuning (nothing in the shared config was chosen on it, on any seed): my_news" in text
    assert "the full matrix is 72: 4 datasets" in text  # the three built-ins, and it
    assert "(my_news, from --dataset-file: also where and how the data reads, and its own PVP)" in text
    assert '## my_news (`my_news`): 20 clients, pattern "{mask} News: {text_a}"' in text


@pytest.mark.slow
def test_the_harness_runs_a_dataset_file_end_to_end(tmp_path, tiny_model_dir, capsys):
    """A CSV of real BBC News text under its own name: its run folders, CSV rows and report section."""
    from fedml_fes.data.sources import load_source
    from fedml_fes_plugins.cli.main import main

    source = load_source(config_from_dict(small_config(tmp_path, tiny_model_dir)))
    (tmp_path / "data").mkdir()
    with (tmp_path / "data" / "news.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(0, len(source.train), 5):
            w.writerow([source.train.texts[i], source.train.classes[source.train.labels[i]]])
    dataset = _dataset_file(tmp_path, data_args={"client_num_in_total": 6})
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"comm_round": 1, "client_num_per_round": 2, "frequency_of_the_test": 1},
        data_args={"gold_labels": 16, "max_test_examples": 30, "max_train_examples": 0},
    )
    cf = tmp_path / "shared.yaml"
    cf.write_text(yaml.safe_dump(raw))
    out, res = tmp_path / "fid", tmp_path / "results"
    assert (
        main(
            [
                "bench",
                "--suite",
                "fidelity",
                "--cf",
                str(cf),
                "--dataset-file",
                str(dataset),
                "--seeds",
                "0",
                "--methods",
                "fedcls",
                "prompt_only",
                "--out",
                str(out),
                "--results",
                str(res),
            ]
        )
        == 0
    )
    assert "2 runs, 0 already complete, 2 to do" in capsys.readouterr().out
    for m in ("fedcls", "prompt_only"):
        saved = yaml.safe_load((out / "my_news" / "runs" / f"{m}-s0" / "config.yaml").read_text())
        assert saved["data_args"]["dataset"] == "custom" and saved["data_args"]["client_num_in_total"] == 6
    rows = list(csv.DictReader((res / "fidelity.csv").open()))
    assert [(r["dataset"], r["method"]) for r in rows] == [
        ("my_news", "zero_shot"),
        ("my_news", "fedcls"),
        ("my_news", "prompt_only"),
    ]
    assert all(0 <= float(r["accuracy"]) <= 1 and 0 < float(r["majority_rate"]) < 1 for r in rows)
    text = (res / "fidelity.md").read_text()
    assert "## my_news (`my_news`): 6 clients" in text and "One shared config across all runs: yes" in text


def test_the_example_dataset_file_reads():
    name, keys = fid.read_dataset_file(REPO / "run_configs" / "fidelity_dataset_example.yaml")
    assert name == "fidelity_dataset_example" and keys["data_args.dataset"] == "custom"
    assert keys["data_args.train_file"] == str(REPO / "my_data" / "reviews_train.csv")
    assert keys["prompt_args.verbalizer"] == {"negative": "bad", "neutral": "okay", "positive": "good"}


def test_a_dataset_file_whose_verbalizer_misses_a_class_fails_before_any_run(tmp_path, tiny_model_dir, capsys):
    from fedml_fes.data.sources import load_source
    from fedml_fes_plugins.cli.main import main

    source = load_source(config_from_dict(small_config(tmp_path, tiny_model_dir)))
    (tmp_path / "data").mkdir()
    with (tmp_path / "data" / "news.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(0, len(source.train), 10):
            w.writerow([source.train.texts[i], source.train.classes[source.train.labels[i]]])
    dataset = _dataset_file(tmp_path, data_args={"client_num_in_total": 6})
    raw = yaml.safe_load(dataset.read_text())
    del raw["prompt_args"]["verbalizer"]["tech"]
    dataset.write_text(yaml.safe_dump(raw))
    cf = tmp_path / "shared.yaml"
    cf.write_text(yaml.safe_dump(small_config(tmp_path, tiny_model_dir, data_args={"max_train_examples": 0})))
    out = tmp_path / "fid"
    assert (
        main(
            [
                "bench",
                "--suite",
                "fidelity",
                "--cf",
                str(cf),
                "--dataset-file",
                str(dataset),
                "--seeds",
                "0",
                "--methods",
                "fedcls",
                "prompt_only",
                "--out",
                str(out),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert "my_news, prompt_only: verbalizer does not cover classes ['tech']" in err and "nothing was run" in err
    assert "\n" not in err and not (out / "my_news").exists()


def test_time_to_accuracy_table_from_run_folders(tmp_path, tiny_model_dir):
    """The paper's Table 4 from the folders: hours (TX2, RPi 4B) and upload to FedFSL's final mean
    accuracy, and the x-faster ratio; a method that never gets there is X."""
    fsl = _fake_run_dir(tmp_path, tiny_model_dir, method="fedfsl")
    fes = _fake_run_dir(tmp_path, tiny_model_dir, method="fes")
    (fes / "metrics.csv").write_text("round,test_acc,pseudo_total,bytes_up\n0,0.7,10,1000\n1,0.6,30,3000\n")
    (fes / "summary.json").write_text(json.dumps({"status": "completed", "final": 0.6, "primary_metric": "test_acc"}))
    rows = fid.collect_rows(tmp_path)
    text = "\n".join(fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {}).splitlines())
    section = text.split("## Time to accuracy (the paper's Table 4)")[1].split("## Runs that ended")[0]
    tx2 = 2 * (2.14e12 / load_profile_tx2().flops_per_s + 2.0) / 3600  # both rounds, as in test_run_row_...
    first = (2.14e12 / load_profile_tx2().flops_per_s + 2.0) / 3600  # FeS reached 62.5% at round 0
    assert "| method | TX2 h to FedFSL's 62.5% | RPi h | upload | seeds |" in section
    fsl_line = next(line for line in section.splitlines() if line.startswith("| FedFSL |"))
    fes_line = next(line for line in section.splitlines() if line.startswith("| FeS |"))
    assert f"| {tx2:.3g} |" in fsl_line and "| 4 kB | 1/1 |" in fsl_line
    assert f"| {first:.3g} |" in fes_line and "| 1 kB | 1/1 |" in fes_line
    assert f"{tx2 / first:.3g}x / - / -" in fes_line  # faster than FedFSL; no FedFSL-BIAS or FedCLS runs
    assert f"| s0 {tx2 / first:.3g}x | - |" in fes_line  # seed by seed: FedFSL s0's own final; no FedFSL-BIAS run
    assert fsl_line.endswith("| 1x / - / - | - | - |")  # no seed-by-seed ratio against itself
    fes_rpi = float(fes_line.split("|")[3])
    assert fes_rpi > float(fes_line.split("|")[2])  # the Pi computes 15x slower than the TX2
    (fsl / "metrics.csv").write_text("round,test_acc,pseudo_total,bytes_up\n0,,10,1000\n1,0.9,30,3000\n")
    (fsl / "summary.json").write_text(json.dumps({"status": "completed", "final": 0.9, "primary_metric": "test_acc"}))
    section = fid.render(fid.collect_rows(tmp_path), "x", "d", tmp_path, {}).split("Table 4)")[1]
    assert "| FeS | X | X | X | 0/1 |" in section
    assert "| s0 X | - |" in section  # FeS never reached FedFSL's 90% in seed 0


def test_x_faster_reads_the_seeds_mean_curves_where_a_seed_alone_misses_the_target(tmp_path, tiny_model_dir):
    """FedFSL's final mean (80%) is reached by its own mean curve, though seed 1 alone ends at 70%:
    the ratio is FedFSL's mean-curve hours over FeS's, where FeS's seeds average 80% after round 0."""
    from fedml_fes.report.time_to_target import hours_to, mean_curve, speedup

    fsl = _fake_run_dir(tmp_path, tiny_model_dir, method="fedfsl")
    fes = _fake_run_dir(tmp_path, tiny_model_dir, method="fes")
    curves = {fsl: ("0.6", "0.9", "0.5", "0.7"), fes: ("0.85", "0.8", "0.75", "0.8")}
    for rd, (a0, a1, b0, b1) in curves.items():
        twin = rd.with_name(rd.name.replace("-s0", "-s1"))
        shutil.copytree(rd, twin)
        for folder, (x, y) in ((rd, (a0, a1)), (twin, (b0, b1))):
            (folder / "metrics.csv").write_text(f"round,test_acc,pseudo_total,bytes_up\n0,{x},10,1000\n1,{y},30,3000\n")
            summary = {"status": "completed", "final": float(y), "primary_metric": "test_acc"}
            (folder / "summary.json").write_text(json.dumps(summary))
    fsl_runs, fes_runs = [fsl, fsl.with_name("fedfsl-s1")], [fes, fes.with_name("fes-s1")]
    one_round = (2.14e12 / load_profile_tx2().flops_per_s + 2.0) / 3600
    assert hours_to(mean_curve(fsl_runs, "FedFSL"), 0.8) == pytest.approx(2 * one_round)
    assert hours_to(mean_curve(fes_runs, "FeS"), 0.8) == pytest.approx(one_round)
    assert hours_to(mean_curve(fsl_runs[1:], "FedFSL s1"), 0.8) is None  # the seed alone never gets there
    assert speedup(one_round, 2 * one_round) == pytest.approx(2.0) and speedup(None, 1.0) is None
    section = fid.render(fid.collect_rows(tmp_path), "x", "d", tmp_path, {}).split("Table 4)")[1]
    fes_line = next(line for line in section.splitlines() if line.startswith("| FeS |"))
    assert "TX2 h to FedFSL's 80.0%" in section and "| 2x / - / - |" in fes_line  # no FedFSL-BIAS, FedCLS: -
    fsl_line = next(line for line in section.splitlines() if line.startswith("| FedFSL |"))
    assert "| 1/2 |" in fsl_line and "| 1x / - / - |" in fsl_line  # one seed reached it; its mean curve did


def load_profile_tx2():
    from fedml_fes.cost.profiles import load_profile

    return load_profile("jetson_tx2")


def test_a_stop_that_torch_save_turns_into_an_error_stops_the_harness(tmp_path, monkeypatch):
    """SIGINT while a checkpoint is written comes out of torch.save as RuntimeError: the run
    (as the in-process runtime does, signals.stop_requested) still knows it was a stop, and
    the harness stops instead of counting a failure and starting the next run."""
    import os
    import signal

    from fedml_fes_plugins.bench import fidelity_run
    from fedml_fes_plugins.bench.runner import BenchInterrupted
    from fedml_fes_plugins.runtimes.signals import stop_requested

    started: list[str] = []

    def run_job(cfg, run_dir, tag, resume=False):
        started.append(tag)
        try:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                raise RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos") from None
        except RuntimeError:
            stop = stop_requested()
            if stop is not None:
                raise stop from None
            return {"status": "failed", "error": "unexpected pos"}
        return {"status": "completed", "final": 0.5}

    monkeypatch.setattr(fidelity_run, "run_job", run_job)
    todo = [fidelity_run.Pending("bbc_news", m, 0, None, tmp_path / m) for m in ("fedfsl", "fes")]
    with pytest.raises(BenchInterrupted, match="interrupted during bbc_news fedfsl s0"):
        fidelity_run._run_all(todo, 1, lambda _line: None)
    assert started == ["bbc_news fedfsl s0"]


def test_ctrl_c_during_the_checks_before_any_run_is_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the harness checks every pending run's config (tokenizers load there, seconds
    to minutes) used to end in a traceback wall: now one line and exit code 130, nothing run."""
    import argparse

    from fedml_fes_plugins.bench import fidelity_run

    def interrupted(_todo):
        raise KeyboardInterrupt

    monkeypatch.setattr(fidelity_run, "preflight", interrupted)
    p = argparse.ArgumentParser()
    fid.add_arguments(p)
    out = tmp_path / "out"
    opts = p.parse_args(["--datasets", "bbc_news", "--methods", "fedfsl", "--seeds", "0", "--out", str(out)])
    opts.results = str(tmp_path / "results")
    assert fid.run_command(opts, "x", echo=lambda _line: None) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "fidelity interrupted before or after its runs (finished runs are kept); run the same command again"
    ]
    assert not list(out.glob("*/runs/*"))  # nothing started


def test_pending_runs_in_another_precision_than_the_finished_ones_are_named(tmp_path, monkeypatch, capsys):
    """`precision: auto` is bfloat16 on a CPU with AVX-512 BF16 and float32 on one without: resuming
    a matrix on the other kind of machine passes the config check (`auto` either way), so the
    harness names the mismatch before the first run instead of mixing precisions silently."""
    import argparse

    from fedml_fes_plugins.bench import fidelity_run
    from fedml_fes_plugins.runtimes import inprocess

    out = tmp_path / "out"
    done = out / "bbc_news" / "runs" / "fedfsl-s1"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"status": "completed", "device": "CPU, 1 thread, bfloat16"}))

    def pending(precision: str):
        cfg = config_from_dict({"common_args": {"precision": precision}})
        return fidelity_run.Pending("bbc_news", "fedfsl", 0, cfg, out / "bbc_news" / "runs" / "fedfsl-s0")

    line = fidelity_run.precision_mismatch([pending("float32")], out)
    assert line.startswith(f"warning: the runs already in {out} (finished or stopped) were computed 1 in bfloat16; ")
    assert "the 1 pending in float32" in line and "\n" not in line
    assert fidelity_run.precision_mismatch([pending("bfloat16")], out) == ""
    assert fidelity_run.precision_mismatch([pending("float32")], tmp_path / "nothing run") == ""
    stopped = out / "bbc_news" / "runs" / "fes-s1"  # a stopped run records its device too
    stopped.mkdir()
    (stopped / "summary.json").write_text(json.dumps({"status": "interrupted", "device": "CPU, 1 thread, bfloat16"}))
    assert " were computed 2 in bfloat16; " in fidelity_run.precision_mismatch([pending("float32")], out)
    # a run resumed on another machine counts in both precisions (its summary's device history)
    mixed = out / "bbc_news" / "runs" / "fes-s2"
    mixed.mkdir()
    history = [
        {"from_round": 0, "device": "CPU, 1 thread, float32"},
        {"from_round": 4, "device": "NVIDIA H200, bfloat16"},
    ]
    (mixed / "summary.json").write_text(json.dumps({"device": "NVIDIA H200, bfloat16", "device_history": history}))
    assert " were computed 3 in bfloat16, 1 in float32; " in fidelity_run.precision_mismatch([pending("float32")], out)
    assert " were computed 3 in bfloat16, 1 in float32; " in fidelity_run.precision_mismatch([pending("bfloat16")], out)
    (mixed / "summary.json").unlink()
    mixed.rmdir()

    # the harness says it before anything runs (stopped here at the MLM build, as by Ctrl-C)
    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fidelity_run, "preflight", lambda _todo: None)
    monkeypatch.setattr(inprocess, "ensure_mlm_build", interrupted)
    p = argparse.ArgumentParser()
    fid.add_arguments(p)
    argv = ["--datasets", "bbc_news", "--methods", "fedfsl", "--seeds", "0", "--out", str(out)]
    opts = p.parse_args(argv + ["--set", "common_args.precision=float32"])
    opts.results = str(tmp_path / "results")
    lines: list[str] = []
    assert fid.run_command(opts, "x", echo=lines.append) == 130
    assert [x for x in lines if x.startswith("warning: ")] == [
        fidelity_run.precision_mismatch([pending("float32")], out)
    ]


PARALLEL_HARNESS = """
import os, sys, time
from pathlib import Path
from fedml_fes_plugins.bench import fidelity_run

def run_job(cfg, run_dir, tag, resume=False):  # the spawned workers run this file again: theirs too
    if os.environ.get("STUBBORN"):  # a run that does not stop when asked
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "pid").write_text(str(os.getpid()))
    time.sleep(300)
    return {"status": "completed", "final": 0.5}

fidelity_run.run_job = run_job

if __name__ == "__main__":
    out = Path(sys.argv[1])
    todo = [fidelity_run.Pending("bbc_news", m, 0, None, out / m) for m in ("fedfsl", "fes")]
    fidelity_run._run_parallel(todo, 2, print)
"""


@pytest.mark.parametrize("stubborn", [False, True])
def test_sigterm_to_the_parallel_harness_stops_its_workers(tmp_path, stubborn):
    """`--jobs 2`: a SIGTERM to the harness (a session's end, `kill`) stops the runs in its workers
    as a SIGINT does; it used to end the harness alone, and its workers ran on, orphaned.
    `stubborn`: the workers ignore it and a second SIGTERM comes while the harness waits for them
    (Ctrl-C twice, `timeout` and `kill` both): it kills them at once and still names the runs; it
    used to end the harness with no line, its workers left running."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "harness.py"
    script.write_text(PARALLEL_HARNESS)
    env = {**os.environ, **({"STUBBORN": "1"} if stubborn else {})}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    pid_files = [tmp_path / "out" / m / "pid" for m in ("fedfsl", "fes")]
    deadline = time.monotonic() + 120
    while not all(f.is_file() and f.read_text() for f in pid_files):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    workers = [int(f.read_text()) for f in pid_files]
    proc.send_signal(signal.SIGTERM)
    if stubborn:  # the harness waits up to 60 s for workers that ignore it: stopped again meanwhile
        time.sleep(3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        second = time.monotonic()
    _out, err = proc.communicate(timeout=120)
    if stubborn:
        assert time.monotonic() - second < 30  # killed at once, not after the 60 s wait
    assert "fidelity interrupted during bbc_news fedfsl s0, bbc_news fes s0" in err, err[-2000:]

    from .test_cross_silo_integration import _wait_dead

    assert _wait_dead(workers, timeout_s=30) == []  # none left running


def test_labeler_rows_are_counted_beside_the_matrix_not_in_it(tmp_path):
    rows = _rows(GOOD)
    rows += [{**r, "variant": "fedfsl@paper", "labeler": "paper"} for r in rows if r["method"] == "fedfsl"]
    text = fid.render(rows, "x", "2026-11-30 10:00", tmp_path, {})
    assert "Completed runs: 45 (the full matrix is 54: " in text
    assert "seeds 0, 1, 2), and 9 runs of `method@labeler` rows." in text


# ---- one writer per run folder ------------------------------------------------------------------


def _held(run_dir: Path):
    """Another process holding `run_dir` as a live run does (a second harness, `fedml-fes run`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return hold_lock(run_dir)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_run_that_a_live_process_holds_is_neither_continued_nor_moved(tmp_path, monkeypatch, jobs):
    """Two harnesses on one --out: the second one met the first one's live run with a checkpoint
    and continued it beside it, both appending rows to one metrics.csv. Now it is one line per
    such run, the folder stays where it is, and the other runs go on."""
    from fedml_fes_plugins.bench import fidelity_run

    live, free = tmp_path / "fes-s0", tmp_path / "fes-s1"
    holder = _held(live)
    (live / "metrics.csv").write_text("round,test_acc\n0,0.5\n")
    started: list[str] = []
    monkeypatch.setattr(
        fidelity_run,
        "run_job",
        lambda cfg, rd, tag, resume=False: started.append(tag) or {"status": "completed", "final": 0.5},
    )
    todo = [fidelity_run.Pending("bbc_news", "fes", s, None, d) for s, d in ((0, live), (1, free))]
    lines: list[str] = []
    try:
        if jobs == 1:
            failed = fidelity_run._run_all(todo, 1, lines.append)
            assert started == ["bbc_news fes s1"]
        else:  # the refusal happens in the parent, before any worker is handed the run
            failed = fidelity_run._run_all(todo[:1], 2, lines.append)
    finally:
        holder.kill()
    assert failed == ["bbc_news fes s0"]
    refusal = [line for line in lines if "bbc_news fes s0" in line and "in use by another live run" in line]
    assert len(refusal) == 1 and f"pid {holder.pid}" in refusal[0]
    assert (live / "metrics.csv").read_text() == "round,test_acc\n0,0.5\n" and not (tmp_path / ".partial").exists()


def test_a_harness_run_holds_its_folder_while_it_runs_and_gives_it_back(tmp_path, monkeypatch):
    import subprocess
    import sys

    from fedml_fes_plugins.bench import fidelity_run
    from fedml_fes_plugins.runtimes import inprocess

    probe = "import sys\nfrom fedml_fes.runtime.rundir import check_not_locked\ncheck_not_locked(sys.argv[1])"
    seen: list[int] = []

    def run_in_process(cfg, run_dir, **_kw):  # what another process sees while the run is live
        seen.append(subprocess.run([sys.executable, "-c", probe, str(run_dir)], capture_output=True).returncode)
        return {"status": "completed", "final": 0.5}

    monkeypatch.setattr(inprocess, "run_in_process", run_in_process)
    monkeypatch.setattr(fidelity_run, "heldout_classes", lambda *_a: None)
    status = fidelity_run.run_job(config_from_dict({}), str(tmp_path / "run"), "tag")
    assert status["status"] == "completed" and seen == [1]
    after = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "run")], capture_output=True)
    assert after.returncode == 0  # given back: the next run of a long harness process, or another one

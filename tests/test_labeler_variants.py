"""benchmarks/labeler_variants.py: the tuning seeds' variant table and its pairing with Prompt-only."""

import shutil
from pathlib import Path

import pytest

from .conftest import load_benchmark_script

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "labelers"


def _row(variant, method, dataset, seed, acc, device="CPU, 1 thread, float32"):
    return {"variant": variant, "method": method, "dataset": dataset, "seed": seed, "accuracy": acc, "device": device}


def test_variants_are_paired_with_prompt_only_of_the_same_seed_and_device():
    script = load_benchmark_script("labeler_variants")
    rows = [
        _row("po", "prompt_only", "trec", 10, 0.80),
        _row("po", "prompt_only", "trec", 11, 0.60),
        _row("po16", "prompt_only", "trec", 12, 0.70, device="CPU, 1 thread, bfloat16"),
        _row("flex", "fedfsl", "trec", 10, 0.85),
        _row("flex", "fedfsl", "trec", 11, 0.58),
        _row("flex", "fedfsl", "trec", 12, 0.99),  # no float32 Prompt-only on seed 12: not paired
        _row("bf", "fedfsl", "trec", 12, 0.75, device="CPU, 1 thread, bfloat16"),
    ]
    pairs = {(p["variant"], p["dataset"]): p for p in script.paired(rows, ["po", "po16"])}
    assert set(pairs) == {("flex", "trec"), ("bf", "trec")}
    flex = pairs["flex", "trec"]
    assert flex["seeds"] == [10, 11] and flex["wins"] == 1
    assert flex["mean"] == pytest.approx(0.715) and flex["reference_mean"] == pytest.approx(0.70)
    assert flex["delta"] == pytest.approx(0.015)
    assert pairs["bf", "trec"]["delta"] == pytest.approx(0.05) and pairs["bf", "trec"]["seeds"] == [12]


def test_the_table_from_committed_tuning_runs_and_a_missing_reference(tmp_path, capsys):
    script = load_benchmark_script("labeler_variants")
    for variant in ("f32_po_base", "f32_gold_every"):
        shutil.copytree(RESULTS / variant, tmp_path / "runs" / variant)
    out = tmp_path / "table"
    assert script.main([str(tmp_path / "runs"), "--out", str(out), "--reference", "f32_po_base"]) == 0
    text = (out / "labelers.md").read_text()
    assert "## Against Prompt-only, paired by seed (reference variants: f32_po_base)" in text
    line = next(x for x in text.splitlines() if x.startswith("| trec | f32_gold_every (fedfsl) |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    seeds = cells[2].split()
    assert set(seeds) >= {"10", "11"} and cells[6].endswith(f"of {len(seeds)}")
    assert float(cells[5]) == pytest.approx(float(cells[3]) - float(cells[4]), abs=0.11)
    capsys.readouterr()
    assert script.main([str(tmp_path / "runs"), "--out", str(out), "--reference", "po_base"]) == 1
    assert "--reference po_base: no completed run of that variant" in capsys.readouterr().err

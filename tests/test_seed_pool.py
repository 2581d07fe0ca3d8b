"""benchmarks/seed_pool.py: seeds of several fidelity CSVs pooled, paired by seed."""

import csv
import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("seed_pool", Path(__file__).parents[1] / "benchmarks" / "seed_pool.py")
seed_pool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(seed_pool)

SHARED = "paper + word dropout 0.2"


def _csv(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "seed", "method", "accuracy", "labeler"])
        w.writerows(rows)
    return path


def test_seeds_of_two_csvs_pool_and_pair_by_seed(tmp_path, capsys):
    a = _csv(
        tmp_path / "a.csv",
        [
            ("trec", 0, "prompt_only", 0.70, ""),
            ("trec", 0, "fes", 0.60, SHARED),
            ("trec", 0, "fes", 0.99, "paper"),  # the @paper row: left out
            ("trec", 0, "fedcls", 0.99, ""),  # not a method of target (b)
        ],
    )
    b = _csv(tmp_path / "b.csv", [("trec", 3, "prompt_only", 0.80, ""), ("trec", 3, "fes", 0.84, SHARED)])
    assert seed_pool.main([str(a), str(b)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| trec |"))
    # FeS - Prompt-only: -10 and +4 points, mean -3.0, standard error std(-10, 4) / sqrt(2) = 7.0
    assert line == "| trec | 0, 3 | 75.0 | - | 72.0 | - | -3.0 ± 7.0 (n=2) | - |"
    assert seed_pool.main([str(a), str(b), "--labeler", "paper"]) == 0
    assert "| trec | 0, 3 | 75.0 | - | 99.0 | - | - | - |" in capsys.readouterr().out  # one @paper seed: no pair


def test_a_seed_in_two_csvs_and_a_foreign_csv_are_one_line_errors(tmp_path):
    a = _csv(tmp_path / "a.csv", [("trec", 0, "prompt_only", 0.70, "")])
    with pytest.raises(SystemExit, match="trec prompt_only seed 0 is in two of the CSVs"):
        seed_pool.main([str(a), str(a)])
    other = tmp_path / "other.csv"
    other.write_text("x,y\n1,2\n")
    with pytest.raises(SystemExit, match="is not a fidelity CSV"):
        seed_pool.main([str(other)])
    with pytest.raises(SystemExit, match="no such file"):
        seed_pool.main([str(tmp_path / "missing.csv")])

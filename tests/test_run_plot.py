"""The per-run figure and the curves the demo compares, read back from a run's files."""

import json
import os
import subprocess
import sys

import yaml

from fedml_fes.report.run_plot import plot_run, plot_runs, run_curve


def _run(tmp_path, name, accs, bytes_up, method="fes"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.yaml").write_text(
        yaml.safe_dump({"train_args": {"method": method}, "common_args": {"random_seed": 0}})
    )
    lines = ["round,clients,bytes_up,test_acc"] + [
        f"{r},1,{b},{'' if a is None else a}" for r, (a, b) in enumerate(zip(accs, bytes_up))
    ]
    (d / "metrics.csv").write_text("\n".join(lines) + "\n")
    (d / "summary.json").write_text(json.dumps({"status": "completed", "primary_metric": "test_acc"}))
    return d


def test_curve_has_evaluated_rounds_with_cumulative_upload(tmp_path):
    d = _run(tmp_path, "a", [None, 0.4, None, 0.6], [10, 20, 30, 40])
    c = run_curve(d)
    assert c.rounds == [1, 3] and c.accuracy == [0.4, 0.6] and c.bytes_up == [30.0, 100.0]
    assert c.hours == []  # no client_costs.csv: no emulated time, never a made-up one


def test_every_run_gets_a_png_and_a_run_without_evaluations_none(tmp_path):
    png = plot_run(_run(tmp_path, "a", [0.3, 0.5], [5, 5]))
    assert png is not None and png.name == "accuracy.png" and png.read_bytes()[:4] == b"\x89PNG"
    assert plot_run(_run(tmp_path, "b", [None, None], [5, 5])) is None


def test_comparison_plot_draws_each_run(tmp_path):
    curves = {
        "FedFSL": run_curve(_run(tmp_path, "a", [0.3, 0.5], [1e8, 1e8], "fedfsl")),
        "FeS": run_curve(_run(tmp_path, "b", [0.2, 0.4], [4e4, 4e4])),
    }
    out = plot_runs(curves, tmp_path / "demo.png", "t")
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000


_DRAW = """
import os, sys
from fedml_fes.report.run_plot import plot_run
plot_run(__import__("pathlib").Path(sys.argv[1]))
os._exit(0) if sys.argv[2] == "hard" else None
"""


def _draw_in_a_process(run_dir, cache, tmp, how):
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"}
    env.update(FEDML_FES_CACHE=str(cache), TMPDIR=str(tmp))
    out = subprocess.run([sys.executable, "-c", _DRAW, str(run_dir), how], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_font_cache_lives_in_the_fedml_fes_cache_and_a_hard_exit_leaves_no_temp_folder(tmp_path):
    """A process that ends without its exit handlers (os._exit: mpirun's aborted ranks, a stopped
    run) once left a fes-matplotlib-* folder in the temp folder per process."""
    run_dir = _run(tmp_path, "a", [0.3, 0.5], [5, 5])
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    _draw_in_a_process(run_dir, cache, tmp, "hard")
    assert list((cache / "matplotlib").glob("fontlist-*.json")) and not list(tmp.iterdir())
    # a cache folder that cannot be made: a temporary one, removed at a normal exit
    (tmp_path / "file").write_text("")
    _draw_in_a_process(run_dir, tmp_path / "file" / "cache", tmp, "normal")
    assert not list(tmp.iterdir()) and (run_dir / "accuracy.png").is_file()

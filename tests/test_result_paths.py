"""Results say how to reproduce them from any checkout: no committed result (benchmarks/results/)
and no doc records a path of the machine that made it, and the harness writes them that way."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from fedml_fes_plugins.bench import fidelity as fid
from fedml_fes_plugins.bench.paths import machine_paths, portable_command, portable_path, portable_text

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".json", ".yaml", ".yml", ".md", ".csv", ".txt")


def _records() -> list[Path]:
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md"]
    for folder in (REPO / "benchmarks" / "results", REPO / "docs"):
        files += sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES)
    return files


def test_no_result_or_doc_records_a_path_of_the_machine_that_made_it():
    files = _records()
    assert len(files) > 90  # the fidelity run folders are among them
    hits = {str(p.relative_to(REPO)): sorted(set(machine_paths(p.read_text()))) for p in files}
    hits = {k: v for k, v in hits.items() if v}
    assert not hits, f"rewrite them with benchmarks/portable_results.py: {hits}"


def test_system_paths_urls_and_placeholders_are_not_machine_paths():
    text = (
        "/etc/mosquitto/mosquitto.conf, /path/to/agnews, /proc/self/x, https://github.com/FedML-AI/FedML, "
        "`runs/fidelity/agnews`, ~/.cache/fedml-fes, <data>/agnews, 1/8 of the pool, MB/s"
    )
    assert machine_paths(text) == []
    assert machine_paths("output_dir: /home/u/fes/runs/x and `/tmp/adw/runs/y`.") == [
        "/home/u/fes/runs/x",
        "/tmp/adw/runs/y",
    ]


def test_portable_path(tmp_path):
    root = tmp_path / "checkout"
    assert portable_path(str(root / "runs" / "fidelity"), root) == "runs/fidelity"
    assert portable_path(str(root), root) == "."
    assert portable_path("/elsewhere/clone/runs/fidelity/cache", root) == "runs/fidelity/cache"
    assert portable_path("/elsewhere/clone/mpi/mpi_host_file", root) == "mpi/mpi_host_file"
    assert (
        portable_path("/elsewhere/clone/run_configs/mlm_fedbert_bbc.yaml", root) == "run_configs/mlm_fedbert_bbc.yaml"
    )
    assert portable_path("/shared/datasets/agnews", root) == "<data>/agnews"
    for unchanged in ("runs/x", "/etc/mosquitto/certs", "/path/to/agnews", "offline:smollm2-135m"):
        assert portable_path(unchanged, root) == unchanged


def test_portable_command_and_text(tmp_path):
    cmd = "python benchmarks/fidelity.py --agnews-dir /shared/agnews --out /x/runs/f --set data_args.data_dir=/d/ag"
    assert portable_command(cmd, tmp_path) == (
        "python benchmarks/fidelity.py --agnews-dir '<data>/agnews' --out runs/f --set 'data_args.data_dir=<data>/ag'"
    )
    saved = json.dumps({"run_dir": "/tmp/adw/runs/bbc_lora", "note": "see /etc/hosts"})
    assert json.loads(portable_text(saved, tmp_path)) == {"run_dir": "runs/bbc_lora", "note": "see /etc/hosts"}


def test_the_fidelity_harness_records_its_command_without_machine_paths(tmp_path):
    p = argparse.ArgumentParser()
    fid.add_arguments(p, standalone=True)
    opts = p.parse_args(["--agnews-dir", "/shared/datasets/agnews", "--out", str(tmp_path / "runs" / "fid")])
    o = fid.options_from(opts, ".venv/bin/python benchmarks/fidelity.py")
    assert o.command == (".venv/bin/python benchmarks/fidelity.py --agnews-dir '<data>/agnews' --out runs/fid"), (
        o.command
    )
    assert machine_paths(o.command) == []


def test_portable_results_rewrites_a_copied_run_folder(tmp_path):
    run = tmp_path / "runs" / "fedcls-s0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("common_args:\n  output_dir: /work/a/runs/fidelity\n")
    (run / "summary.json").write_text(json.dumps({"run_dir": "/work/a/runs/fidelity/agnews/runs/fedcls-s0"}))
    script = REPO / "benchmarks" / "portable_results.py"
    check = subprocess.run([sys.executable, str(script), "--check", str(tmp_path)], capture_output=True, text=True)
    assert check.returncode == 1 and "/work/a/runs/fidelity" in check.stdout
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, capture_output=True)
    assert (run / "config.yaml").read_text() == "common_args:\n  output_dir: runs/fidelity\n"
    assert json.loads((run / "summary.json").read_text()) == {"run_dir": "runs/fidelity/agnews/runs/fedcls-s0"}
    check = subprocess.run([sys.executable, str(script), "--check", str(tmp_path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    # and back, for one machine: run folders copied out of the results resume under its data folder
    (run / "config.yaml").write_text("data_args:\n  data_dir: <data>/agnews\n")
    subprocess.run([sys.executable, str(script), "--data", str(tmp_path / "d"), str(tmp_path)], check=True)
    assert (run / "config.yaml").read_text() == f"data_args:\n  data_dir: {(tmp_path / 'd').resolve()}/agnews\n"

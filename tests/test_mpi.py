"""FedML's MPI runtime under a real mpirun, against the in-process runtime."""

import json
import time

import pytest

from fedml_fes.config import load_config
from fedml_fes.errors import FesError
from fedml_fes.runtime.rundir import make_run_dir

from .conftest import SHARED_AGNEWS, small_config, write_config

pytestmark = pytest.mark.slow


def _mpirun(cf, run_dir, np=3, overrides=()):
    from fedml_fes_plugins.runtimes.launcher import MpirunJob, run_mpirun

    cfg = load_config(cf)
    lines = []
    run_mpirun(MpirunJob(cfg, str(cf), np, overrides=list(overrides), echo=lines.append, timeout_s=600), run_dir)
    return json.loads((run_dir / "summary.json").read_text()), lines


def test_mpirun_shell_launcher_matches_in_process_bit_for_bit(tmp_path, tiny_model_dir, clean_home):
    """FedNLP's way to start a run (`sh mpi/run_fes_mpi.sh NP CONFIG`, the hostfile of
    mpi/mpi_host_file): the same per-round metrics as the in-process runtime, bit for bit, and
    nothing written outside the run directory."""
    import subprocess
    from pathlib import Path

    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    repo = Path(__file__).resolve().parents[1]
    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    cfg = load_config(cf)
    launch = ["sh", str(repo / "mpi" / "run_fes_mpi.sh"), "3", str(cf), "--run-dir", str(tmp_path / "mpi")]
    out = subprocess.run(launch, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    mpi_summary = json.loads((tmp_path / "mpi" / "summary.json").read_text())
    local = run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert mpi_summary["status"] == "completed" and mpi_summary["runtime"] == "fedml_mpi"
    assert len(mpi_summary["per_round"]) == 3
    assert mpi_summary["per_round"] == local["per_round"]
    assert "round   2: test_acc=" in out.stdout
    assert list(clean_home.iterdir()) == []


def test_client_raising_in_round_2_ends_the_run_quickly(tmp_path, tiny_model_dir, faults):
    faults(raise_in_round=2)
    raw = small_config(tmp_path, tiny_model_dir, train_args={"comm_round": 5})
    cf = write_config(tmp_path / "c.yaml", raw)
    run_dir = make_run_dir(load_config(cf), str(tmp_path / "mpi"))
    start = time.monotonic()
    with pytest.raises(FesError) as e:
        _mpirun(cf, run_dir, np=2)  # one silo: the failing client is on it
    elapsed = time.monotonic() - start
    assert "failed in round 2" in str(e.value) and "injected fault" in str(e.value)
    assert "\n" not in str(e.value)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 2  # rounds 0, 1 kept
    assert elapsed < 120, elapsed


@pytest.mark.skipif(not SHARED_AGNEWS.is_dir(), reason="../shared/datasets/agnews is absent (not a dev checkout)")
def test_agnews_fedcls_under_mpirun(tmp_path, tiny_model_dir):
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        data_args={
            "dataset": "agnews",
            "data_dir": str(SHARED_AGNEWS),
            "client_num_in_total": 100,
            "gold_labels": 64,
            "gold_sparsity": 0.001,
            "max_train_examples": 0,
            "max_test_examples": 200,
            "partition_alpha": 1.0,
        },
        train_args={"comm_round": 2, "client_num_per_round": 5},
    )
    cf = write_config(tmp_path / "c.yaml", raw)
    summary, _ = _mpirun(cf, make_run_dir(load_config(cf), str(tmp_path / "mpi")), np=2)  # the data path is the point
    assert summary["status"] == "completed" and len(summary["per_round"]) == 2


def test_fedfsl_two_phase_rounds_match_in_process(tmp_path, tiny_model_dir):
    """Labeling + training phases under mpirun equal the in-process run, pseudo labels too, and
    so do the per-client cost rows: FLOPs and bytes depend on shapes only, the same in every
    runtime. With the `agree` labeler (the paper's labeling is the same pass without its filter):
    round 0's phase carries the gold clients' class sums up, later passes the prototypes down."""
    import csv

    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass": 10, "labeler": "agree", "start_round": 1},
    )
    cf = write_config(tmp_path / "c.yaml", raw)
    cfg = load_config(cf)
    mpi_summary, _ = _mpirun(cf, make_run_dir(cfg, str(tmp_path / "mpi")))
    local = run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    assert mpi_summary["per_round"] == local["per_round"]
    for name in ("mpi", "local"):
        assert sorted(p.parent.name for p in (tmp_path / name / "clients").glob("*/pseudo_labels.json"))
    mpi_labels = {p.parent.name: p.read_text() for p in (tmp_path / "mpi" / "clients").glob("*/pseudo_labels.json")}
    local_labels = {p.parent.name: p.read_text() for p in (tmp_path / "local" / "clients").glob("*/pseudo_labels.json")}
    assert mpi_labels == local_labels
    keys = (
        "round",
        "phase",
        "client_id",
        "fwd_flops",
        "bwd_flops",
        "encoder_calls",
        "bytes_down",
        "bytes_up",
        "activation_peak_bytes",
        "peak_train_bytes",
    )
    costs = {
        name: [[r[k] for k in keys] for r in csv.DictReader((tmp_path / name / "client_costs.csv").open(newline=""))]
        for name in ("mpi", "local")
    }
    assert costs["mpi"] == costs["local"] and costs["mpi"]
    assert any(r[1] == "label" and r[0] == "0" and int(r[7]) > 0 for r in costs["mpi"])  # the gold class sums

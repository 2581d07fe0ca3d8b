"""benchmarks/overhead.py: its baseline uses each runtime's own split of a round's clients, and
the raw workers really run side by side on real trainings (the timings themselves are the
benchmark's, never asserted here)."""

from __future__ import annotations

import pytest

from fedml_fes.runtime.payload import assign_slots
from fedml_fes.runtime.tasks import ClientTask

from .conftest import load_benchmark_script, small_config, write_config


@pytest.fixture(scope="module")
def bench():
    return load_benchmark_script("overhead")


def test_the_mpirun_split_is_the_runtimes_own_round_robin(bench):
    clients = [17, 3, 9, 12]
    plan = assign_slots([ClientTask(0, c, "train", 0) for c in clients], 2)
    assert bench.mpirun_split(clients) == [[t.client_id for t in plan[s]] for s in range(2)] == [[3, 12], [9, 17]]


def test_the_cross_silo_split_puts_a_device_on_its_owner_silo(bench):
    from fedml_fes_plugins.cross_silo.config import CrossSiloSettings

    settings = CrossSiloSettings.__new__(CrossSiloSettings)
    settings.silo_num = 2
    clients = [17, 3, 9, 12, 4]
    shares = bench.cross_silo_split(clients)
    assert shares == [[12, 4], [17, 3, 9]]
    assert all(settings.owner_rank(c) == 1 + s for s, share in enumerate(shares) for c in share)


def test_the_baseline_is_each_rounds_busiest_worker(bench):
    times = {(1, 0): 1.0, (1, 1): 4.0, (1, 2): 2.0, (2, 5): 3.0, (2, 7): 0.5}
    kept = [(1, [0, 1, 2], 9.9), (2, [5, 7], 9.9)]
    assert bench.baseline(kept, times, bench.split_for("inprocess")) == pytest.approx(7.0 + 3.5)
    # mpirun: round 1 -> [0, 2] 3.0 and [1] 4.0; round 2 -> [5] 3.0 and [7] 0.5
    assert bench.baseline(kept, times, bench.split_for("mpirun")) == pytest.approx(4.0 + 3.0)
    # cross-silo: round 1 -> even [0, 2] 3.0, odd [1] 4.0; round 2 -> all odd: 3.5
    assert bench.baseline(kept, times, bench.split_for("cross_silo")) == pytest.approx(4.0 + 3.5)
    assert bench.worker_tasks(kept, bench.split_for("cross_silo"), 2) == [[(1, 0), (1, 2)], [(1, 1), (2, 5), (2, 7)]]


@pytest.mark.slow
def test_raw_workers_time_every_task_side_by_side(bench, tmp_path, tiny_model_dir):
    cf = write_config(tmp_path / "job.yaml", small_config(tmp_path, tiny_model_dir))
    tasks = [[(0, 0), (1, 2)], [(0, 1)]]
    times = bench.raw_times(str(cf), ["common_args.torch_threads=1"], tasks, tmp_path / "raw")
    assert set(times) == {(0, 0), (1, 2), (0, 1)} and all(s > 0 for s in times.values())
    assert (tmp_path / "raw" / "go").exists()


def test_a_raw_worker_that_cannot_start_is_one_line(bench, tmp_path):
    with pytest.raises(SystemExit, match="a raw worker failed before starting"):
        bench.raw_times(str(tmp_path / "missing.yaml"), [], [[(0, 0)]], tmp_path / "raw")

"""Client updates parked on disk until the round's aggregation (fedml_fes.runtime.spill)."""

from __future__ import annotations

import csv
import sys
from collections import OrderedDict

import pytest
import torch

from fedml_fes.config import config_from_dict
from fedml_fes.runtime.spill import DiskTensors, GlobalSpill, UpdateSpill
from fedml_fes.runtime.tasks import ClientUpdate
from fedml_fes.tuning.params import fedavg, payload_bytes, screen_updates

from .conftest import small_config


def _update(client: int, seed: int, big: int = 300) -> ClientUpdate:
    g = torch.Generator().manual_seed(seed)
    params = OrderedDict(
        [("z.weight", torch.randn(big, 64, generator=g)), ("a.bias", torch.randn(64, generator=g, dtype=torch.float64))]
    )
    return ClientUpdate(round_idx=3, client_id=client, params=params, weight=1.0 + client)


def test_a_parked_update_reads_back_the_same_tensors_in_the_same_order(tmp_path):
    spill = UpdateSpill(tmp_path / "updates", min_bytes=1)
    u = _update(1, 0)
    parked = spill.keep(u)
    assert isinstance(parked.params, DiskTensors)
    assert list(parked.params) == ["z.weight", "a.bias"] and len(parked.params) == 2
    for name, t in u.params.items():
        assert parked.params[name].dtype == t.dtype and torch.equal(parked.params[name], t)
    assert (parked.client_id, parked.weight, parked.round_idx) == (1, 2.0, 3)
    spill.clear()
    assert not (tmp_path / "updates").exists()


def test_structure_checks_of_a_parked_update_read_no_file(tmp_path):
    """A parked update knows its tensors' shapes and dtypes: validate_update (finite=False, as
    the server calls it) passes or rejects it with its file gone; a value check still reads it."""
    from fedml_fes.errors import FesError
    from fedml_fes.tuning.params import validate_update

    spill = UpdateSpill(tmp_path / "updates", min_bytes=1)
    u = _update(1, 0)
    parked = spill.keep(u).params
    wrong = OrderedDict((k, torch.zeros(3) if k == "a.bias" else v) for k, v in u.params.items())
    for reference in (u.params, spill.keep(_update(2, 1)).params):  # in memory, or itself parked
        parked.path.rename(parked.path.with_suffix(".away"))
        validate_update(parked, reference, "client 1", finite=False)
        with pytest.raises(FesError, match=r"tensor 'a.bias' is \(\(64,\), torch.float64\), expected \(\(3,\)"):
            validate_update(parked, wrong, "client 1", finite=False)
        with pytest.raises(FileNotFoundError):
            validate_update(parked, reference, "client 1", finite=True)
        parked.path.with_suffix(".away").rename(parked.path)


def test_small_updates_stay_in_memory(tmp_path):
    u = _update(1, 0, big=2)
    assert UpdateSpill(tmp_path / "updates", min_bytes=2**20).keep(u) is u
    assert not (tmp_path / "updates").exists()


def test_screen_and_fedavg_over_parked_updates_match_in_memory_bit_for_bit(tmp_path):
    spill = UpdateSpill(tmp_path / "updates", min_bytes=1)
    updates = [_update(c, c) for c in range(4)]
    updates.append(_update(9, 9))
    updates[-1].params["z.weight"].mul_(1e3)  # out of line: the median bound rejects it
    reference = OrderedDict((k, torch.zeros_like(v)) for k, v in updates[0].params.items())
    held = [(u.weight, u.params) for u in updates]
    parked = [(u.weight, spill.keep(u).params) for u in updates]
    kept_h, rejected_h = screen_updates(held, reference, norm_factor=10.0)
    kept_p, rejected_p = screen_updates(parked, reference, norm_factor=10.0)
    assert kept_h == kept_p == [0, 1, 2, 3] and [i for i, _ in rejected_p] == [4]
    avg_h = fedavg([held[i] for i in kept_h])
    avg_p = fedavg([parked[i] for i in kept_p])
    assert list(avg_p) == list(avg_h)
    assert all(torch.equal(avg_p[k], avg_h[k]) and avg_p[k].dtype == avg_h[k].dtype for k in avg_h)


def test_the_global_tensors_park_on_disk_keeping_the_one_before(tmp_path):
    spill = GlobalSpill(tmp_path / "global", min_bytes=1)
    versions = [_update(0, seed).params for seed in range(5)]
    parked = [spill(v) for v in versions]  # five rounds: file names never come back
    assert all(isinstance(p, DiskTensors) for p in parked)
    assert parked[-1].nbytes == payload_bytes(versions[-1]) > 0  # known without reading the file
    assert not any(p.path.exists() for p in parked[:3])  # two rounds back and older: nobody reads them
    for p, v in zip(parked[3:], versions[3:]):  # the newest, and the reference of the round that replaced it
        assert list(p) == list(v) and all(torch.equal(p[k], v[k]) for k in v)
    assert len(list((tmp_path / "global").iterdir())) == 2
    small = _update(0, 0, big=2).params
    assert GlobalSpill(tmp_path / "g2", min_bytes=2**20)(small) is small
    spill.clear()
    assert not (tmp_path / "global").exists()


def test_an_in_process_run_with_parked_updates_is_the_run_that_holds_them(tmp_path, tiny_model_dir, monkeypatch):
    """Same metrics and the same final global model; the updates and the global tensors were
    really read from disk, and none is left in the run folder."""
    from fedml_fes.runtime import spill as spill_mod
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    reads = []
    real_get = spill_mod.DiskTensors.__getitem__
    monkeypatch.setattr(
        spill_mod.DiskTensors,
        "__getitem__",
        lambda self, k: reads.append((self.path.parent.name, k)) or real_get(self, k),
    )
    results = {}
    for name, min_bytes in (("held", 2**62), ("parked", 0)):
        raw = small_config(tmp_path / name, tiny_model_dir, train_args={"comm_round": 4, "frequency_of_the_test": 1})
        cfg = config_from_dict(raw)
        run_dir = make_run_dir(cfg)
        summary = run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None, spill_min_bytes=min_bytes)
        assert summary["status"] == "completed"
        assert not (run_dir / "updates").exists() and not (run_dir / "global").exists()
        rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
        state = torch.load(run_dir / "checkpoint.pt", weights_only=True)["server"]["global"]
        results[name] = ([(r["test_acc"], r["train_loss"], r["bytes_up"]) for r in rows], state)
        if name == "held":
            assert not reads
    assert {folder for folder, _ in reads} == {"updates", "global"}
    assert results["held"][0] == results["parked"][0]
    held, parked = results["held"][1], results["parked"][1]
    assert list(held) == list(parked) and all(torch.equal(held[k], parked[k]) for k in held)


@pytest.mark.slow
def test_the_memory_benchmark_runs_every_mode_and_compares_them(tmp_path, tiny_model_dir):
    """benchmarks/run_memory.py end to end on a tiny model: a fresh process per mode (held,
    parked, parked with gradient checkpointing), the same metrics, a peak for each."""
    import json

    from .conftest import load_benchmark_script, write_config

    cf = write_config(tmp_path / "c.yaml", small_config(tmp_path, tiny_model_dir))
    results = tmp_path / "run_memory.json"
    script = load_benchmark_script("run_memory")
    argv = ["--cf", str(cf), "--method", "fedcls", "--rounds", "2", "--out", str(tmp_path / "out")]
    assert script.main([*argv, "--results", str(results)]) == 0
    report = json.loads(results.read_text())
    assert [r["mode"] for r in report["runs"]] == ["held", "parked", "checkpointed"]
    assert report["same_metrics"] is True
    assert all(r["status"] == "completed" and r["peak_rss_gb"] > 0.1 for r in report["runs"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_goes_back_to_the_system_between_phases():
    """What a phase frees in small blocks stays in the process (glibc keeps it) until
    return_freed_memory, which the in-process runtime calls after every phase."""
    from fedml_fes_plugins.runtimes.inprocess import return_freed_memory

    def rss_mb() -> float:
        return int(next(line for line in open("/proc/self/status") if line.startswith("VmRSS")).split()[1]) / 1e3

    blocks = [bytearray(4000) for _ in range(40000)]  # 160 MB of heap blocks below mmap's threshold
    kept = blocks[::50]  # the survivors pin the heap: nothing is returned by itself
    del blocks
    before = rss_mb()
    return_freed_memory()
    assert before - rss_mb() > 80
    assert len(kept) == 800

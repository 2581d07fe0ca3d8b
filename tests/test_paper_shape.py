"""benchmarks/paper_shape.py: the paper's memory comparison on RoBERTa-large's shape (run on a
GPU machine); here on a tiny shape, on the CPU, in seconds."""

from __future__ import annotations

import json

import pytest
import torch

from .conftest import load_benchmark_script


@pytest.fixture(scope="module")
def shape_script():
    return load_benchmark_script("paper_shape")


def test_each_method_trains_what_it_should(shape_script):
    full, bias, fes = (shape_script.build("tiny", m, 0) for m in ("fedfsl", "fedfsl_bias", "fes"))
    trainable = {
        name: {n for n, p in m.named_parameters() if p.requires_grad}
        for name, m in (("full", full), ("bias", bias), ("fes", fes))
    }
    assert all(n.endswith("bias") or n == "class_bias" for n in trainable["bias"] | trainable["fes"])
    assert trainable["fes"] < trainable["bias"] < trainable["full"]
    layers = {int(n.split("layer.")[1].split(".")[0]) for n in trainable["fes"] if "layer." in n}
    assert layers == {4, 5}  # the top third of 6 layers, as plan_for's default
    assert fes.caches_bottom and fes.split.b == 4 and not full.caches_bottom


def test_a_filled_cache_means_no_step_reads_the_bottom(shape_script):
    """After the fill, the frozen layers and embeddings can leave (here: to the meta device,
    where any read fails), and the steps still run: what the GPU figure with the bottom dropped
    relies on."""
    model = shape_script.build("tiny", "fes", 0)
    data = shape_script.batches(2, 2, 16, shape_script.SHAPES["tiny"]["vocab_size"], 0)
    for b in data:
        model.fill_cache(b["input_ids"], b["attention_mask"])
    shape_script.drop_bottom(model, to="meta")
    assert model.mlm.base_model.encoder.layer[0].attention.self.query.weight.is_meta
    times = shape_script.train_steps(model, data, torch.device("cpu"), lr=1e-3)
    assert len(times) == 2
    # without the fill the bottom must run, and a meta bottom cannot
    model.split.cache = shape_script.ActivationCache()
    with pytest.raises((NotImplementedError, RuntimeError)):
        shape_script.train_steps(model, data, torch.device("cpu"), lr=1e-3)


def test_the_script_writes_rows_for_every_method(shape_script, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert (
        shape_script.main(["--shape", "tiny", "--steps", "2", "--seq", "16", "--device", "cpu", "--out", str(out)]) == 0
    )
    info = json.loads(out.read_text())
    rows = {r["method"]: r for r in info["rows"]}
    assert set(rows) == {"fedfsl", "fedfsl_bias", "fes"} and info["seq"] == 16
    assert (
        rows["fes"]["trainable_params"] < rows["fedfsl_bias"]["trainable_params"] < rows["fedfsl"]["trainable_params"]
    )
    # full tuning holds gradients and AdamW state for every weight: the largest analytic peak
    assert rows["fedfsl"]["analytic_peak_bytes"] > rows["fedfsl_bias"]["analytic_peak_bytes"] > 0
    assert rows["fedfsl"]["analytic_peak_bytes"] > rows["fes"]["analytic_peak_bytes"] > 0
    assert "fes" in capsys.readouterr().out


def test_bad_arguments_are_one_line(shape_script, tmp_path):
    with pytest.raises(SystemExit) as e:
        shape_script.main(["--shape", "tiny", "--seq", "5000", "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2

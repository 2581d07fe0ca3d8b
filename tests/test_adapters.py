"""AutoFedNLP-style adapter and LoRA tuning through PEFT: config, what trains and
travels, where the modules go, the activation cache below them, runs end to end."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import AdapterConfig, config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.model import PromptEncoder, PromptMLM
from fedml_fes.runtime.inert import inert_keys, is_inert
from fedml_fes.tuning.adapters import adapter_plan, add_adapters, default_depth, is_adapter_param
from fedml_fes.tuning.params import payload_bytes, trainable_state
from fedml_fes.tuning.plan import layer_index, num_layers
from fedml_fes.tuning.split import FrozenBottom

from .conftest import small_config, write_config

HIDDEN, INTERMEDIATE = 32, 64  # the tiny model of conftest.tiny_model_dir (2 layers)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def _prompt_model(tok, layers: int) -> PromptMLM:
    torch.manual_seed(0)
    mlm = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tok),
            hidden_size=HIDDEN,
            num_hidden_layers=layers,
            num_attention_heads=2,
            intermediate_size=INTERMEDIATE,
        )
    )
    return PromptMLM(mlm, [tok.convert_tokens_to_ids(w) for w in ("good", "bad")])


# ---- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value", [("width", 0), ("depth", -2), ("alpha", 0), ("dropout", 1.0), ("learning_rate", -0.001)]
)
def test_bad_adapter_value_is_one_line_naming_the_key(tmp_path, key, value):
    with pytest.raises(FesError) as e:
        config_from_dict(small_config(tmp_path, "m", train_args={"method": "lora"}, adapter_args={key: value}))
    assert f"adapter_args.{key}" in str(e.value) and "\n" not in str(e.value)


def test_unknown_adapter_key_is_named(tmp_path):
    with pytest.raises(FesError, match="unknown config key 'rank'.*adapter_args"):
        config_from_dict(small_config(tmp_path, "m", adapter_args={"rank": 4}))


def test_depth_beyond_the_top_layer_is_one_line():
    with pytest.raises(FesError, match=r"adapter_args.depth is 4, but the model has 4 encoder layers"):
        adapter_plan(AdapterConfig(depth=4), "lora", 4)
    assert adapter_plan(AdapterConfig(depth=3), "lora", 4).depth == 3


def test_default_depth_freezes_the_bottom_third():
    assert [default_depth(n) for n in (1, 2, 4, 6, 12, 24)] == [0, 1, 1, 2, 4, 8]
    assert (
        adapter_plan(AdapterConfig(), "adapter", 6).describe()
        == "layers 0-1 frozen, adapter (PEFT LoRA on FFN output, width 8) in layers 2-5"
    )


def test_adapter_learning_rate_is_the_adapter_methods_training_rate(tmp_path):
    def lr(method: str, adapter_lr: float) -> float:
        cfg = config_from_dict(
            small_config(
                tmp_path,
                "m",
                train_args={"method": method, "learning_rate": 0.001},
                adapter_args={"learning_rate": adapter_lr},
            )
        )
        return cfg.for_round(3, uses_pseudo=False).train.learning_rate

    assert lr("lora", 0.02) == lr("adapter", 0.02) == 0.02
    assert lr("lora", 0) == 0.001  # 0: train_args'
    assert lr("prompt_only", 0.02) == 0.001  # other methods never read adapter_args


def test_adapter_args_are_inert_for_other_methods_only():
    assert is_inert("adapter_args.width", inert_keys("fedfsl", "full"))
    assert is_inert("adapter_args.width", inert_keys("fes", "full"))
    assert not is_inert("adapter_args.width", inert_keys("lora", "full"))
    assert not is_inert("tuning_args.activation_cache", inert_keys("adapter", "full"))
    assert is_inert("tuning_args.bias_layers", inert_keys("adapter", "full"))


# ---- where the modules go, what trains --------------------------------------------------------


@pytest.mark.parametrize(
    "kind, per_layer", [("adapter", {"output.dense"}), ("lora", {"attention.self.query", "attention.self.value"})]
)
@pytest.mark.parametrize("depth", [0, 2, 3, -1])
def test_adapters_only_in_the_configured_layers(tok, kind, per_layer, depth):
    model = _prompt_model(tok, layers=4)
    plan = adapter_plan(AdapterConfig(depth=depth, width=3), kind, num_layers(model))
    add_adapters(model.mlm, plan, seed=0)
    adapted = [n for n, _ in model.named_parameters() if is_adapter_param(n)]
    first = 1 if depth == -1 else depth  # default: round(4 / 3) = 1
    assert {layer_index(n) for n in adapted} == set(range(first, 4))
    modules = {n.split(f".layer.{layer_index(n)}.")[1].split(".lora_")[0] for n in adapted}
    assert modules == per_layer  # never the attention output projection, the FFN input, ...
    trainable = [f"mlm.{n}" for n, p in model.mlm.named_parameters() if p.requires_grad]
    assert trainable == adapted  # base weights, LayerNorms, embeddings, MLM head: all frozen
    assert all(t.shape[0] == 3 or t.shape[1] == 3 for n, t in model.named_parameters() if n in adapted)


def test_adapter_init_is_seeded_and_leaves_the_global_rng_alone(tok):
    states = []
    for _ in range(2):
        model = _prompt_model(tok, layers=2)
        torch.manual_seed(123)
        before = torch.get_rng_state()
        add_adapters(model.mlm, adapter_plan(AdapterConfig(), "lora", 2), seed=7)
        assert torch.equal(before, torch.get_rng_state())
        states.append(trainable_state(model))
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


@pytest.mark.parametrize("kind", ["adapter", "lora"])
@pytest.mark.parametrize("class_bias", [False, True])
def test_only_adapter_tensors_travel(tmp_path, tiny_model_dir, kind, class_bias):
    """The payload: PEFT's tensors, plus the prompt's C-sized class bias when it trains."""
    from fedml_fes.runtime.job import build_job

    width = 4
    cfg = config_from_dict(
        small_config(
            tmp_path,
            tiny_model_dir,
            train_args={"method": kind},
            adapter_args={"width": width, "depth": 1},
            prompt_args={"train_class_bias": class_bias},
        )
    )
    job = build_job(cfg, "both", tmp_path / "run")
    state = trainable_state(job.model)
    adapters = [n for n in state if n != "class_bias"]
    assert adapters and all(is_adapter_param(n) and layer_index(n) == 1 for n in adapters)
    assert ("class_bias" in state) is class_bias
    # layer 1 only: adapter = down (intermediate -> r) + up (r -> hidden); lora = q and v, each hidden <-> r
    floats = width * (INTERMEDIATE + HIDDEN) if kind == "adapter" else 2 * width * (HIDDEN + HIDDEN)
    classes = len(job.data.classes)
    assert payload_bytes(state) == 4 * (floats + (classes if class_bias else 0))


# ---- the frozen bottom and its activation cache ----------------------------------------------


def test_split_forward_with_adapters_matches_the_plain_forward(tok):
    """The top layers, PEFT modules included, run the same below a frozen-bottom split."""
    model = _prompt_model(tok, layers=4)
    add_adapters(model.mlm, adapter_plan(AdapterConfig(depth=2), "lora", 4), seed=0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_()  # zero at init: make the adapters change the output
    batch = PromptEncoder(tok, "{text_a} It was {mask}.", 32).batch(["great food", "slow and rude staff here"], None)
    model.eval()
    plain = model(**batch)
    model.split = FrozenBottom(model.mlm.base_model, 2)
    assert torch.allclose(plain, model(**batch), atol=1e-5)
    model.split = None
    model.mlm.base_model.encoder.layer[3].attention.self.value.lora_B["default"].weight.data.zero_()
    assert not torch.allclose(plain, model(**batch), atol=1e-5)  # the check sees the adapters


@pytest.mark.parametrize("kind", ["adapter", "lora"])
def test_activation_cache_on_and_off_train_the_same_adapters(tmp_path, tiny_model_dir, kind):
    from fedml_fes.runtime.client import LocalTrainer
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.tasks import ClientTask, task_seed

    trained, stats = [], []
    for cache in (True, False):
        cfg = config_from_dict(
            small_config(
                tmp_path / str(cache),
                tiny_model_dir,
                train_args={"method": kind, "epochs": 2},
                adapter_args={"depth": 1, "learning_rate": 0.01},
                tuning_args={"activation_cache": cache},
            )
        )
        job = build_job(cfg, "both", tmp_path / str(cache) / "run")
        client = next(c for c in job.data.clients if c.num_gold)
        start = trainable_state(job.model)
        update = LocalTrainer(job).run(
            ClientTask(0, client.client_id, "train", task_seed(0, 0, client.client_id)), client
        )
        assert any(not torch.equal(start[k], v) for k, v in update.params.items())  # it trained
        trained.append(update.params)
        stats.append(update.metrics)
    on, off = trained
    assert list(on) == list(off) and all(torch.allclose(on[k], off[k], atol=1e-6) for k in on)
    assert stats[0]["cache_misses"] > 0 and stats[0]["cache_hits"] > 0  # epoch 2 reads the cache
    assert "cache_hits" not in stats[1]
    assert stats[0]["cost_bottom_tokens"] == stats[1]["cost_bottom_tokens"] / 2  # the bottom ran once, not twice


# ---- end to end -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["adapter", "lora"])
def test_two_rounds_in_process_write_metrics_and_send_only_adapters(tmp_path, tiny_model_dir, kind):
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": kind, "comm_round": 2},
        adapter_args={"width": 2, "learning_rate": 0.01},
        prompt_args={"train_class_bias": False},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    summary = run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert len(rows) == 2 and all(0.0 <= float(r["test_acc"]) <= 1.0 for r in rows)
    # default depth on 2 layers: layer 1 only; width 2, no class bias
    per_client = 4 * 2 * (INTERMEDIATE + HIDDEN) if kind == "adapter" else 4 * 2 * 2 * (HIDDEN + HIDDEN)
    assert all(int(r["bytes_up"]) == per_client * len(r["clients"].split()) for r in rows)
    assert list((run_dir / "clients").glob("*/activations.pt"))  # the frozen layer 0 was cached
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


CLI = [sys.executable, "-m", "fedml_fes_plugins.cli.main"]


def test_bad_adapter_width_via_the_cli_is_one_line(tmp_path, tiny_model_dir):
    cf = write_config(
        tmp_path / "c.yaml",
        small_config(tmp_path, tiny_model_dir, train_args={"method": "adapter"}, adapter_args={"width": 0}),
    )
    out = subprocess.run([*CLI, "run", "--cf", str(cf)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr
    assert lines[0].startswith("fedml-fes: error:") and "adapter_args.width must be >= 1" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_dry_run_names_the_adapters_and_their_bytes(tmp_path, tiny_model_dir):
    """The dry run builds the model on the meta device: same PEFT tensors, same bytes."""
    from fedml_fes.runtime.preview import preview_run

    cfg = config_from_dict(
        small_config(
            tmp_path,
            tiny_model_dir,
            train_args={"method": "lora"},
            adapter_args={"width": 4},
            prompt_args={"train_class_bias": False},
        )
    )
    lines = preview_run(cfg)
    trainable = next(line for line in lines if line.startswith("trainable:"))
    assert "lora (PEFT LoRA on attention query/value, width 4) in layers 1-1" in trainable
    assert f"one client update: {4 * 2 * 4 * (HIDDEN + HIDDEN):,} bytes" in trainable
    cfg.adapter.depth = 2
    with pytest.raises(FesError, match="adapter_args.depth is 2, but the model has 2 encoder layers"):
        preview_run(cfg)

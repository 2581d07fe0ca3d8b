"""AutoFedNLP's progressive configurator: adapter views over one model, what a
view trains and sends, the server's decisions, and a run that uses it end to end."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import AdapterConfig, config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.model import PromptMLM
from fedml_fes.tuning.adapters import adapter_plan, add_adapters, capacity_plan
from fedml_fes.tuning.autoconfig import (
    AdapterView,
    ProgressiveConfigurator,
    applied_view,
    expand_update,
    load_view,
    set_lora_scaling,
    slice_update,
)
from fedml_fes.tuning.params import trainable_state

from .conftest import small_config

HIDDEN = 32


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def _capacity_model(tok, layers=3, start=(2, 2), min_depth=0, max_width=4) -> PromptMLM:
    torch.manual_seed(0)
    mlm = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tok),
            hidden_size=HIDDEN,
            num_hidden_layers=layers,
            num_attention_heads=2,
            intermediate_size=64,
        )
    )
    model = PromptMLM(mlm, [tok.convert_tokens_to_ids(w) for w in ("good", "bad")])
    a = AdapterConfig(depth=start[0], width=start[1], min_depth=min_depth, max_width=max_width)
    plan = capacity_plan(adapter_plan(a, "lora", layers), a)
    add_adapters(model.mlm, plan, seed=0)
    set_lora_scaling(model.mlm, a.alpha / start[1])
    return model


def _batch(tok):
    enc = tok(["a fine day [MASK]", "nothing works here [MASK]"], return_tensors="pt", padding=True)
    return enc


def _lora_layer(name: str) -> int:
    return int(name.split(".layer.")[1].split(".")[0])


# ---- views: what trains, what travels ------------------------------------------------------


def test_capacity_is_built_once_and_a_view_sends_only_its_layers_and_ranks(tok):
    model = _capacity_model(tok)
    full = trainable_state(model)
    lora = [n for n in full if ".lora_" in n]
    assert {_lora_layer(n) for n in lora} == {0, 1, 2}  # min_depth 0: every layer carries capacity
    sent = slice_update(full, AdapterView(2, 2))
    assert {_lora_layer(n) for n in sent if ".lora_" in n} == {2}
    for n, t in sent.items():
        if ".lora_A." in n:
            assert t.shape == (2, HIDDEN) and full[n].shape == (4, HIDDEN)
        elif ".lora_B." in n:
            assert t.shape == (HIDDEN, 2)
    assert "class_bias" in sent  # non-LoRA trainables always travel


def test_expand_restores_the_full_set_with_the_global_outside_the_view(tok):
    model = _capacity_model(tok)
    reference = trainable_state(model)
    view = AdapterView(1, 2)
    changed = {n: t + 1.0 for n, t in slice_update(reference, view).items()}
    full = expand_update(changed, reference, view, "client 3")
    assert list(full) == list(reference)
    for n, t in full.items():
        if ".lora_" not in n:
            assert torch.equal(t, reference[n] + 1)
        elif _lora_layer(n) < 1:
            assert torch.equal(t, reference[n])
        elif ".lora_A." in n:
            assert torch.equal(t[:2], reference[n][:2] + 1) and torch.equal(t[2:], reference[n][2:])
        else:
            assert torch.equal(t[:, :2], reference[n][:, :2] + 1) and torch.equal(t[:, 2:], reference[n][:, 2:])


def test_an_update_that_does_not_fit_its_view_is_one_line(tok):
    reference = trainable_state(_capacity_model(tok))
    wide = slice_update(reference, AdapterView(1, 4))
    with pytest.raises(
        FesError,
        match=r"client 7: tensor '.*lora_A.*' has shape \(4, 32\), configuration d1w2 "
        r"sends \(2, 32\)",
    ) as e:
        expand_update(wide, reference, AdapterView(1, 2), "client 7")
    assert "\n" not in str(e.value)
    with pytest.raises(FesError, match="does not match configuration d2w2: missing none, unexpected"):
        expand_update(slice_update(reference, AdapterView(1, 2)), reference, AdapterView(2, 2), "client 7")


def test_training_under_a_view_changes_only_the_view_and_stops_autograd_at_its_depth(tok):
    model = _capacity_model(tok, start=(2, 2))
    before = trainable_state(model)
    enc = _batch(tok)
    with applied_view(model, AdapterView(1, 2)):
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
        for _ in range(3):
            # B starts at zero: a step must first move B before A gets a gradient
            out = model.mlm(**enc).logits.sum()
            out.backward()
            for n, p in model.named_parameters():
                if ".lora_" in n and _lora_layer(n) < 1:
                    assert p.grad is None  # autograd never reached layer 0's adapters
            opt.step()
            opt.zero_grad()
    assert all(p.requires_grad for n, p in model.named_parameters() if n in before)  # restored
    after = trainable_state(model)
    for n in before:
        if ".lora_" not in n:
            continue
        if _lora_layer(n) < 1:
            assert torch.equal(after[n], before[n])
        elif ".lora_B." in n:  # ranks >= 2 never trained: still LoRA's zero init
            assert not torch.equal(after[n][:, :2], before[n][:, :2])
            assert torch.count_nonzero(after[n][:, 2:]) == 0


def test_capacity_outside_the_view_computes_nothing(tok):
    """After training under a view, the tensors outside it can be anything on the A side: B
    is still zero there, so the deeper / wider view starts from the very same function."""
    model = _capacity_model(tok, start=(2, 2))
    model.eval()  # no dropout: outputs comparable
    enc = _batch(tok)
    with applied_view(model, AdapterView(2, 2)):
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        model.mlm(**enc).logits.sum().backward()
        opt.step()
    with torch.no_grad():
        trained = model.mlm(**enc).logits.clone()
        for n, p in model.named_parameters():
            if ".lora_A." in n:  # scramble A outside the view d2w2
                if _lora_layer(n) < 2:
                    p.normal_()
                else:
                    p[2:].normal_()
        assert torch.allclose(model.mlm(**enc).logits, trained, atol=1e-6)


# ---- the server's decisions ------------------------------------------------------------------


def test_assign_splits_the_round_between_the_main_view_and_its_trials():
    c = ProgressiveConfigurator(AdapterView(4, 8), min_depth=2, max_width=32, trial_rounds=2, trial_share=0.4)
    assert c.trials() == [AdapterView(3, 8), AdapterView(4, 16)]
    assert c.union() == AdapterView(3, 16)  # what the global travels down as
    views = c.assign(0, [3, 9, 11, 12, 20])
    assert sorted(views) == [3, 9, 11, 12, 20]
    assert sorted(v.name for v in views.values()) == ["d3w8", "d4w16", "d4w8", "d4w8", "d4w8"]
    assert c.assign(0, [3, 9, 11, 12, 20]) == views  # seeded per round
    # two clients: one trial slot, the trials take turns; one client: the main view only
    assert {c.assign(r, [3, 9])[3].name for r in (0, 1)} | {c.assign(r, [3, 9])[9].name for r in (0, 1)} == {
        "d4w8",
        "d3w8",
        "d4w16",
    }
    assert sorted(v.name for v in c.assign(0, [3, 9]).values())[1] == "d4w8"
    assert set(c.assign(0, [3]).values()) == {AdapterView(4, 8)}
    top = ProgressiveConfigurator(AdapterView(2, 32), min_depth=2, max_width=32, trial_rounds=1, trial_share=0.4)
    assert top.trials() == [] and set(top.assign(0, [1, 2, 3]).values()) == {AdapterView(2, 32)}


def test_a_trial_that_gains_more_per_device_second_becomes_the_main_view():
    main, deeper, wider = AdapterView(4, 8), AdapterView(3, 8), AdapterView(4, 16)
    c = ProgressiveConfigurator(main, min_depth=2, max_width=32, trial_rounds=2, trial_share=0.4)
    events, up = c.finish_round(0, {main: 0.01, deeper: 0.02, wider: 0.01}, {main: 10, deeper: 12, wider: 11})
    assert events == [] and up is None  # mid-period: no decision yet
    events, up = c.finish_round(1, {main: 0.01, deeper: 0.03, wider: 0.0}, {main: 10, deeper: 12, wider: 11})
    assert up == deeper and c.main == deeper
    assert "rounds 0-1" in events[0] and "upgrade d4w8 to d3w8" in events[0]
    assert c.trials() == [AdapterView(2, 8), AdapterView(3, 16)]
    # next period: the trials gain less per second than the main view: keep it
    c.finish_round(
        2,
        {deeper: 0.04, AdapterView(2, 8): 0.04, AdapterView(3, 16): 0.01},
        {deeper: 10, AdapterView(2, 8): 20, AdapterView(3, 16): 11},
    )
    events, up = c.finish_round(3, {deeper: 0.0}, {deeper: 10})
    assert up is None and c.main == deeper and "keep d3w8" in events[0]
    assert [h["upgrade"] for h in c.history] == ["d3w8", None]


def test_no_trial_wins_without_a_positive_gain():
    main, deeper, wider = AdapterView(4, 8), AdapterView(3, 8), AdapterView(4, 16)
    c = ProgressiveConfigurator(main, min_depth=2, max_width=32, trial_rounds=1, trial_share=0.4)
    _events, up = c.finish_round(0, {main: -0.05, deeper: -0.01, wider: 0.0}, {main: 10, deeper: 12, wider: 11})
    assert up is None and c.main == main


def test_configurator_state_survives_a_checkpoint():
    main, deeper = AdapterView(4, 8), AdapterView(3, 8)
    c = ProgressiveConfigurator(main, min_depth=2, max_width=32, trial_rounds=3, trial_share=0.4)
    c.finish_round(0, {main: 0.01, deeper: 0.02}, {main: 1.0, deeper: 2.0})
    d = ProgressiveConfigurator(main, min_depth=2, max_width=32, trial_rounds=3, trial_share=0.4)
    d.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert d.state_dict() == c.state_dict()


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("configurator", "auto", "fixed or progressive"),
        ("trial_share", 1.0, "(0, 1)"),
        ("trial_rounds", 0, ">= 1"),
        ("max_width", 4, "must be >= adapter_args.width"),
    ],
)
def test_bad_configurator_value_is_one_line(tmp_path, key, value, words):
    with pytest.raises(FesError) as e:
        config_from_dict(
            small_config(tmp_path, "m", train_args={"method": "lora"}, adapter_args={"width": 8, key: value})
        )
    assert f"adapter_args.{key}" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_a_start_below_the_capacity_is_one_line():
    with pytest.raises(FesError, match=r"adapter_args.min_depth \(3\) lies above the starting depth \(2\)"):
        capacity_plan(adapter_plan(AdapterConfig(depth=2), "lora", 6), AdapterConfig(depth=2, min_depth=3))


# ---- end to end ------------------------------------------------------------------------------


def test_progressive_lora_run_logs_every_decision_and_sends_each_clients_view(tmp_path, tiny_model_dir):
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "lora", "comm_round": 3, "client_num_per_round": 5},
        adapter_args={
            "depth": 1,
            "width": 2,
            "min_depth": 0,
            "max_width": 8,
            "trial_rounds": 1,
            "configurator": "progressive",
            "learning_rate": 0.01,
        },
        prompt_args={"train_class_bias": False},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    summary = run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [r["adapter_view"] for r in rows][0] == "d1w2" and all(r["clients_trained"] == "5" for r in rows)
    events = (run_dir / "events.log").read_text()
    assert "configurator: start at d1w2" in events
    assert sum("configurator: rounds" in line for line in events.splitlines()) == 3  # one decision per round
    # the upload is what the views sent: main d1w2 = 1 layer x 2 LoRA modules x (A 2x32 + B 32x2)
    # float32; a trial d0w2 or d1w4 sends twice that
    per_view = {"d1w2": 2 * 2 * 2 * HIDDEN * 4, "d0w2": 2 * 2 * 2 * 2 * HIDDEN * 4, "d1w4": 2 * 2 * 4 * HIDDEN * 4}
    tasks = [t for t in csv.DictReader((run_dir / "client_costs.csv").open()) if t["phase"] == "train"]
    assert {int(t["bytes_up"]) for t in tasks} <= set(per_view.values())
    assert sum(int(r["bytes_up"]) for r in rows) == sum(int(t["bytes_up"]) for t in tasks)
    # the global travels down sliced to the round's views: d1w2 with trials d0w2, d1w4 -> d0w4,
    # half the capacity built (d0w8)
    assert int(rows[0]["bytes_down"]) == 5 * (2 * 2 * 2 * 4 * HIDDEN * 4)
    if "upgrade" not in events:  # no trial won: every round trained 3 main + one of each trial
        assert all(int(r["bytes_up"]) == 3 * per_view["d1w2"] + per_view["d0w2"] + per_view["d1w4"] for r in rows)
        assert all(r["bytes_down"] == rows[0]["bytes_down"] for r in rows)


def test_a_sliced_global_fills_the_leading_ranks_and_leaves_the_rest(tok):
    model = _capacity_model(tok)
    before = trainable_state(model)
    sliced = {n: t + 1.0 for n, t in slice_update(before, AdapterView(1, 2)).items()}
    load_view(model, sliced)
    after = trainable_state(model)
    assert torch.equal(after[next(iter(sliced))], sliced[next(iter(sliced))])
    for n in before:
        if ".lora_" in n and _lora_layer(n) == 0:
            assert torch.equal(after[n], before[n])
        elif ".lora_A." in n:
            assert torch.equal(after[n][:2], before[n][:2] + 1) and torch.equal(after[n][2:], before[n][2:])
    name = next(n for n in sliced if ".lora_A." in n)
    with pytest.raises(FesError, match=rf"payload tensor '{name}' has shape \(2, 31\), the model's is \(4, 32\)"):
        load_view(model, {name: torch.zeros(2, 31)})


@pytest.mark.slow
def test_progressive_lora_under_mpirun_matches_in_process(tmp_path, tiny_model_dir):
    """The views travel in the tasks' options and the sliced tensors over FedML's MPI
    transport: the same rows, upgrades included, as in process."""
    from fedml_fes.config import load_config
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process
    from fedml_fes_plugins.runtimes.launcher import MpirunJob, run_mpirun

    from .conftest import write_config

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "lora", "comm_round": 3, "client_num_per_round": 5},
        adapter_args={
            "depth": 1,
            "width": 2,
            "min_depth": 0,
            "max_width": 8,
            "trial_rounds": 1,
            "configurator": "progressive",
            "learning_rate": 0.05,
        },
        prompt_args={"train_class_bias": False},
        pacing_args={"val_holdout": 0},
    )  # scored on the training labels, a trial wins in round 0
    cf = write_config(tmp_path / "c.yaml", raw)
    cfg = load_config(cf)
    local = run_in_process(cfg, make_run_dir(cfg, str(tmp_path / "local")), progress=False, echo=lambda _l: None)
    mpi_dir = make_run_dir(cfg, str(tmp_path / "mpi"))
    run_mpirun(MpirunJob(cfg, str(cf), 3, echo=lambda _l: None, timeout_s=600), mpi_dir)
    mpi = json.loads((mpi_dir / "summary.json").read_text())
    assert mpi["status"] == "completed" and mpi["per_round"] == local["per_round"]
    assert "upgrade d1w2 to" in (mpi_dir / "events.log").read_text()  # the upgrade path crosses MPI too

"""FeS's designs: pacing (AUG-E, Algorithm 1), representational filtering, co-planning, cache."""
import csv

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.model import PromptEncoder, PromptMLM
from fedml_fes.pseudo.filtering import cached_order, knn_indices, random_order, vote_k_order
from fedml_fes.pseudo.pacing import Pacing, PacingConfigurator, aug_e, default_grid, parse_grid, per_pass_count
from fedml_fes.runtime.job import make_run_dir
from fedml_fes.tuning.params import trainable_state
from fedml_fes.tuning.plan import LayerPlan, apply_tuning, num_layers
from fedml_fes.tuning.split import ActivationCache, FrozenBottom

from .conftest import small_config


# ---- curriculum pacing ----------------------------------------------------------------------

def test_default_grid_has_32_and_parsing():
    assert len(default_grid()) == 32 and len(set(default_grid())) == 32
    assert parse_grid(["2,5,10", [1, 1, 5]]) == [Pacing(2, 5, 10.0), Pacing(1, 1, 5.0)]
    with pytest.raises(FesError, match="'f,n,k'"):
        parse_grid(["2,5"])
    with pytest.raises(FesError, match="empty configuration list"):
        config_from_dict({"pacing_args": {"grid": []}})


def test_aug_e_formula():
    p = Pacing(f=2, n=4, k=10)
    # eta * dacc / (l_i * n / f + theta * l_t * k) = 1 * 0.06 / (0.5 * 2 + 2 * 1.0 * 10)
    assert aug_e(0.06, p, 0.5, 1.0, eta=1.0, theta=2.0) == pytest.approx(0.06 / 21.0)


def test_configurator_trials_then_picks_best_then_switches():
    grid = [Pacing(1, 5, 10), Pacing(2, 2, 5), Pacing(4, 1, 5)]
    c = PacingConfigurator(grid, trial_rounds=1, top=2, switch_threshold=0.0, infer_latency=0.5,
                           train_latency=1.0)
    events = []
    c.start(0.30)  # accuracy before round 0
    for r, acc in enumerate([0.31, 0.40, 0.41]):  # trial gains: 0.01, 0.09, 0.01
        events += c.observe(r, acc)
    assert "delta_acc=+0.0100" in events[0]
    assert c.current == Pacing(2, 2, 5) and len(c.ranked) == 2
    assert any("pacing chose <f=2, n=2, k=5%>" in e for e in events)
    events = c.observe(3, 0.40)  # accuracy fell: AUG-E < s -> switch to the next of the top t
    assert c.current == c.ranked[1] and "pacing switch" in events[0]


def test_per_pass_count():
    assert per_pass_count(64, 10) == 7 and per_pass_count(3, 1) == 1


# ---- representational filtering -------------------------------------------------------------

def _clusters(sizes, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(len(sizes), dim)) * 10
    points = np.concatenate([c + rng.normal(size=(n, dim)) * 0.1 for c, n in zip(centers, sizes)])
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return points.astype(np.float32), labels


def test_knn_excludes_self_and_finds_cluster_mates():
    pts, labels = _clusters([20, 20])
    v = knn_indices(pts, 5)
    assert v.shape == (40, 5) and not (v == np.arange(40)[:, None]).any()
    assert (labels[v] == labels[:, None]).all()


def test_vote_k_covers_every_cluster_first():
    pts, labels = _clusters([200, 60, 20])
    order = vote_k_order(knn_indices(pts, 10), rho=10.0)
    assert sorted(order.tolist()) == list(range(280))
    # diverse: the first picks are spread over all clusters, not all from the biggest one
    assert len(set(labels[order[:12]].tolist())) == 3


def test_filter_bad_input():
    with pytest.raises(FesError, match="rho must be > 1"):
        vote_k_order(np.zeros((3, 1), dtype=np.int64), rho=1.0)
    with pytest.raises(FesError, match="rho must be > 1"):
        config_from_dict({"filter_args": {"rho": 0.5}})


def test_cached_order_is_computed_once(tmp_path):
    class Counting:
        calls = 0

        def embed(self, texts):
            Counting.calls += 1
            return _clusters([len(texts)])[0]

    texts = [f"t{i}" for i in range(30)]
    a = cached_order(tmp_path, texts, "vote_k", Counting(), 5, 10.0, seed=0)
    b = cached_order(tmp_path, texts, "vote_k", Counting(), 5, 10.0, seed=0)
    assert np.array_equal(a, b) and Counting.calls == 1
    assert np.array_equal(cached_order(tmp_path, texts, "random", Counting(), 5, 10.0, seed=3),
                          random_order(30, 3))


# ---- depth/capacity co-planning and the activation cache ------------------------------------

@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def _prompt_model(tok, layers=4):
    torch.manual_seed(0)
    mlm = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=layers,
                                     num_attention_heads=2, intermediate_size=64))
    return PromptMLM(mlm, [tok.convert_tokens_to_ids(w) for w in ("good", "bad")])


def test_layer_plan_sets_trainable_set_and_payload(tok):
    model = _prompt_model(tok)
    plan = LayerPlan(num_layers(model), full_layers=1, bias_layers=1)
    apply_tuning(model, "plan", plan)
    trainable = trainable_state(model)
    assert all(".layer.3." in n or ".layer.2." in n or n.startswith("mlm.cls.") or n == "class_bias"
               for n in trainable)
    assert any(".layer.3." in n and n.endswith("weight") for n in trainable)  # top layer: full
    assert all(n.endswith("bias") for n in trainable if ".layer.2." in n)  # middle: biases only
    assert not any("embeddings" in n or ".layer.0." in n or ".layer.1." in n for n in trainable)
    assert plan.describe() == "layers 0-1 frozen, layers 2-2 bias-only, layers 3-3 full"


def test_plan_naming_missing_layers_is_an_error(tok):
    with pytest.raises(FesError, match="layers that do not exist"):
        LayerPlan(num_layers(_prompt_model(tok)), full_layers=2, bias_layers=3)


def test_activation_cache_is_bit_identical_and_no_backward_below(tok):
    model = _prompt_model(tok)
    plan = LayerPlan(4, full_layers=0, bias_layers=2)
    apply_tuning(model, "plan", plan)
    split = FrozenBottom(model.mlm.base_model, plan.frozen_bottom)
    batch = PromptEncoder(tok, "{text_a} It was {mask}.", 32).batch(["great food", "slow and rude staff here"], None)
    model.eval()
    plain = model(**batch)
    model.split = split
    no_cache = model(**batch)
    split.cache = ActivationCache()
    first = model(**batch)
    second = model(**batch)
    assert split.cache.hits == 2 and split.cache.misses == 2
    assert torch.equal(no_cache, first) and torch.equal(first, second)
    assert torch.allclose(plain, no_cache, atol=1e-5)
    model.train()
    model(**batch).sum().backward()
    for name, p in model.named_parameters():
        if ".layer.0." in name or ".layer.1." in name or "embeddings" in name:
            assert p.grad is None, name
    assert any(p.grad is not None for p in model.parameters())


# ---- FeS end to end, in-process -------------------------------------------------------------

def _run(tmp_path, tiny_model_dir, method, **sections):
    from fedml_fes_plugins.inprocess import run_in_process
    sections = {"data_args": {"gold_labels": 16, "gold_sparsity": 0.001},
                "tuning_args": {"full_layers": 0, "bias_layers": 1},
                "pacing_args": {"grid": ["1,3,20", "2,2,10"], "val_examples": 30},
                "filter_args": {"knn": 5}, **sections}
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": method, "comm_round": 4}, **sections)
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    return run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None), run_dir


def test_fes_in_process_uses_all_three_designs(tmp_path, tiny_model_dir):
    summary, run_dir = _run(tmp_path, tiny_model_dir, "fes")
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert rows[0]["pacing"] == "<f=1, n=3, k=20%>" and rows[1]["pacing"] == "<f=2, n=2, k=10%>"
    events = (run_dir / "events.log").read_text()
    assert "pacing trial 1/2" in events and "pacing chose" in events
    labeled = [r for r in rows if r["inferred_fraction"]]
    assert labeled and all(float(r["inferred_fraction"]) < 1.0 for r in labeled)  # filtering skips part
    assert list((run_dir / "clients").glob("*/activations.pt"))  # co-planning's frozen bottom is cached
    assert list((run_dir / "clients").glob("*/proxy_embeddings.npy"))


def test_fes_payload_is_smaller_than_fedfsl(tmp_path, tiny_model_dir):
    _, fes_dir = _run(tmp_path / "fes", tiny_model_dir, "fes")
    _, fsl_dir = _run(tmp_path / "fsl", tiny_model_dir, "fedfsl")

    def per_client(d):
        r = next(csv.DictReader((d / "metrics.csv").open()))
        return int(r["bytes_up"]) / len(r["clients"].split())
    assert per_client(fes_dir) * 1000 < per_client(fsl_dir)


@pytest.mark.parametrize("method", ["fes_no_cp", "fes_no_rf", "fes_no_dc"])
def test_fes_ablations_run(tmp_path, tiny_model_dir, method):
    summary, run_dir = _run(tmp_path, tiny_model_dir, method)
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    if method == "fes_no_rf":
        assert all(float(r["inferred_fraction"]) == 1.0 for r in rows if r["inferred_fraction"])
    if method == "fes_no_dc":
        assert {r["pacing"] for r in rows} == {"<f=1, n=5, k=10%>"}
    if method == "fes_no_cp":
        assert not list((run_dir / "clients").glob("*/activations.pt"))


def test_knn_larger_than_every_pool_is_an_error(tmp_path, tiny_model_dir):
    from fedml_fes.runtime.job import build_job
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, train_args={"method": "fes"},
                                       filter_args={"knn": 500}))
    with pytest.raises(FesError, match="filter_args.knn=500 is larger than every client's unlabeled pool"):
        build_job(cfg, "both", tmp_path / "run")


# ---- the co-planning planner ----------------------------------------------------------------

def test_planner_binary_search_finds_shallowest_good_depth():
    from fedml_fes.tuning.planner import Probe, search_depth
    calls = []

    def probe(d):
        calls.append(d)
        return Probe(d, accuracy=min(0.9, 0.5 + 0.1 * d), cost=float(d), payload_bytes=100 * d)
    result = search_depth(24, probe, tolerance=0.01)
    assert result.chosen.depth == 4 and result.reference.depth == 24
    assert len(calls) <= 7 and len(set(calls)) == len(calls)  # log2(24) probes, none repeated
    assert "(chosen)" in result.table()
    with pytest.raises(FesError, match="depth range"):
        search_depth(0, probe, 0.01)


def test_plan_command_on_tiny_model(tmp_path, tiny_model_dir):
    import subprocess
    import sys

    from .conftest import write_config
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "fes"},
                       data_args={"gold_labels": 16, "gold_sparsity": 0.001},
                       pacing_args={"mode": "static"}, filter_args={"method": "random"})
    cf = write_config(tmp_path / "c.yaml", raw)
    out = subprocess.run([sys.executable, "-m", "fedml_fes_plugins.cli", "plan", "--cf", str(cf), "--rounds", "1",
                          "--out", str(tmp_path / "plan")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "chosen plan: tuning_args:" in out.stdout
    assert (tmp_path / "plan" / "plan.json").is_file()


def test_warmup_rounds_train_with_their_own_lr_and_epochs(tmp_path, tiny_model_dir):
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "fes", "learning_rate": 1e-4, "epochs": 1},
                       pseudo_args={"start_round": 2, "warmup_learning_rate": 3e-3, "warmup_epochs": 3})
    cfg = config_from_dict(raw)
    warm, later = cfg.for_round(1, uses_pseudo=True).train, cfg.for_round(2, uses_pseudo=True).train
    assert (warm.learning_rate, warm.epochs) == (3e-3, 3)
    assert (later.learning_rate, later.epochs) == (1e-4, 1)
    assert cfg.for_round(0, uses_pseudo=False) is cfg  # no warm-up without pseudo labels
    with pytest.raises(FesError, match="warmup_learning_rate and warmup_epochs must be >= 0"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, pseudo_args={"warmup_epochs": -1}))


def test_oversampled_filter_infers_more_and_keeps_the_confident(tmp_path, tiny_model_dir):
    _, plain = _run(tmp_path / "plain", tiny_model_dir, "fes")
    _, over = _run(tmp_path / "over", tiny_model_dir, "fes", filter_args={"knn": 5, "oversample": 2.0})

    def first_pass(d):
        r = next(r for r in csv.DictReader((d / "metrics.csv").open()) if r["inferred"])
        return int(r["inferred"]), int(r["pseudo_labeled"])
    (inf_plain, kept_plain), (inf_over, kept_over) = first_pass(plain), first_pass(over)
    assert kept_over == kept_plain and inf_plain == kept_plain  # same target kept
    assert inf_over > inf_plain  # from a longer prefix of the ranking
    with pytest.raises(FesError, match="oversample must be >= 1"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, filter_args={"oversample": 0.5}))


@pytest.mark.parametrize("train_it", [True, False])
def test_class_bias_switch_decides_whether_it_trains_and_travels(tmp_path, tiny_model_dir, train_it):
    from fedml_fes.runtime.job import build_job
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, train_args={"method": "fes"},
                                        tuning_args={"full_layers": 0, "bias_layers": 1},
                                        prompt_args={"train_class_bias": train_it}))
    job = build_job(cfg, "both", tmp_path / "run")
    assert job.model.class_bias.requires_grad is train_it
    assert ("class_bias" in trainable_state(job.model)) is train_it

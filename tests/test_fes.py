"""FeS's designs: pacing (AUG-E, Algorithm 1), representational filtering, co-planning, cache."""

import csv

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import PacingConfig, config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.model import PromptEncoder, PromptMLM
from fedml_fes.pseudo.filtering import cached_order, centred, knn_indices, random_order, vote_k_order
from fedml_fes.pseudo.pacing import Pacing, PacingConfigurator, aug_e, budget_target, default_grid, parse_grid
from fedml_fes.runtime.rundir import make_run_dir
from fedml_fes.tuning.params import trainable_state
from fedml_fes.tuning.plan import LayerPlan, apply_tuning, num_layers, plan_for
from fedml_fes.tuning.split import ActivationCache, FrozenBottom

from .conftest import small_config


def _play(trainer, job, params, tasks):
    """Run `tasks` in process, each client starting from the same global `params`."""
    out = []
    for t in tasks:
        trainer.set_params(params)
        out.append(trainer.run(t, job.data.clients[t.client_id]))
    return out


# ---- curriculum pacing ----------------------------------------------------------------------


def test_default_grid_is_built_around_the_papers_examples_and_parsing():
    grid = default_grid()
    assert Pacing(5, 2, 1.0) in grid and Pacing(1, 4, 2.0) in grid and len(set(grid)) == len(grid) == 12
    assert {p.k for p in grid} == {1.0, 2.0, 4.0}  # 1-4% of the pool per event
    assert parse_grid(["2,5,10", [1, 1, 5]]) == [Pacing(2, 5, 10.0), Pacing(1, 1, 5.0)]
    with pytest.raises(FesError, match="'f,n,k'"):
        parse_grid(["2,5"])
    with pytest.raises(FesError, match="empty configuration list"):
        config_from_dict({"pacing_args": {"grid": []}})


def test_aug_e_formula():
    p = Pacing(f=2, n=4, k=10)
    # eta * dacc / (l_i * n / f + theta * l_t * k) = 1 * 0.06 / (0.5 * 2 + 2 * 1.0 * 10)
    assert aug_e(0.06, p, 0.5, 1.0, eta=1.0, theta=2.0) == pytest.approx(0.06 / 21.0)


def test_configurator_trials_in_parallel_on_idle_groups_then_retrials_only_the_top():
    grid = [Pacing(1, 2, 2), Pacing(5, 2, 1), Pacing(1, 4, 4)]
    settings = PacingConfig(
        trial_rounds=1, top=2, switch_threshold=0.0, infer_latency_s=0.5, train_latency_s=1.0, parallel_trials=8
    )
    c = PacingConfigurator(grid, settings)
    rng = np.random.default_rng(0)
    events = c.start_trials(0, idle=list(range(10, 20)), fraction=0.0, rng=rng)
    assert len(c.running) == 3 and len(events) == 3  # all three at once, same round
    groups = [set(t.group) for t in c.running]
    assert [len(g) for g in groups] == [2, 2, 4] and len(set.union(*groups)) == 8  # disjoint groups
    assert c.busy_clients() == set.union(*groups) and c.current == grid[0]
    events = c.finish_trial_round(0, {0: 0.01, 1: 0.02, 2: 0.0})
    # AUG-E: 0.01 / (0.5*2 + 2) ; 0.02 / (0.5*2/5 + 1) ; 0 -> <5,2,1> wins
    assert c.current == Pacing(5, 2, 1) and c.ranked == [Pacing(5, 2, 1), Pacing(1, 2, 2)]
    assert not c.trialing and any("pacing chose <f=5, n=2, k=1%>" in e for e in events)
    assert c.observe(1, 0.50) == []  # opens the main window
    events = c.observe(2, 0.45)  # accuracy fell: AUG-E < s -> only the top t are trialled again
    assert "re-trialling the top 2" in events[0] and c.pending == [Pacing(5, 2, 1), Pacing(1, 2, 2)]
    c.start_trials(3, idle=[1, 2, 3, 4], fraction=0.1, rng=rng)
    assert [t.config for t in c.running] == [Pacing(5, 2, 1), Pacing(1, 2, 2)]
    assert all(t.fraction == 0.1 for t in c.running)
    c.finish_trial_round(3, {0: -0.01, 1: 0.03})
    assert c.current == Pacing(1, 2, 2)


def test_configurator_breaks_ties_towards_the_cheaper_configuration():
    grid = [Pacing(1, 4, 4), Pacing(5, 2, 1), Pacing(1, 2, 1)]
    settings = PacingConfig(trial_rounds=1, top=3, switch_threshold=0.0, infer_latency_s=0.5, train_latency_s=1.0)
    c = PacingConfigurator(grid, settings)
    c.start_trials(0, idle=list(range(20)), fraction=0.0, rng=np.random.default_rng(0))
    c.finish_trial_round(0, {})  # no gain measured anywhere: AUG-E 0 for all
    assert c.ranked == [Pacing(5, 2, 1), Pacing(1, 2, 1), Pacing(1, 4, 4)]


def test_configurator_waits_for_idle_clients_and_gives_up_when_none():
    settings = PacingConfig(
        trial_rounds=1, top=2, switch_threshold=0.0, infer_latency_s=0.5, train_latency_s=1.0, parallel_trials=1
    )
    c = PacingConfigurator([Pacing(1, 4, 1), Pacing(1, 2, 1)], settings)
    c.start_trials(0, idle=[1, 2, 3, 4, 5], fraction=0.0, rng=np.random.default_rng(0))
    assert len(c.running) == 1 and c.pending == [Pacing(1, 2, 1)]  # one at a time: the second waits
    c.finish_trial_round(0, {0: 0.1})
    events = c.start_trials(1, idle=[7], fraction=0.0, rng=np.random.default_rng(0))
    assert not c.trialing and "not trialled" in events[0] and c.current == Pacing(1, 4, 1)


def test_budget_is_a_share_of_the_pool_at_least_one():
    assert budget_target(64, 0.02) == 2 and budget_target(64, 0.06) == 4 and budget_target(3, 0.01) == 1
    assert budget_target(100, 0.07) == 7  # no float noise: 100 * (0.01 * 7) is 7.000000000000001
    assert budget_target(10, 2.0) == 10


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
    a = cached_order(tmp_path, texts, "vote_k", Counting(), 5, 10.0, seed=0, pool_share=1.0)
    b = cached_order(tmp_path, texts, "vote_k", Counting(), 5, 10.0, seed=0, pool_share=1.0)
    assert np.array_equal(a, b) and Counting.calls == 1
    assert np.array_equal(
        cached_order(tmp_path, texts, "random", Counting(), 5, 10.0, seed=3, pool_share=1.0), random_order(30, 3)
    )


# ---- depth/capacity co-planning and the activation cache ------------------------------------


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def _prompt_model(tok, layers=4):
    torch.manual_seed(0)
    mlm = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64
        )
    )
    return PromptMLM(mlm, [tok.convert_tokens_to_ids(w) for w in ("good", "bad")])


def test_layer_plan_sets_trainable_set_and_payload(tok):
    model = _prompt_model(tok)
    plan = LayerPlan(num_layers(model), full_layers=1, bias_layers=1)
    apply_tuning(model, "plan", plan)
    trainable = trainable_state(model)
    assert all(".layer.3." in n or ".layer.2." in n or n.startswith("mlm.cls.") or n == "class_bias" for n in trainable)
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
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    sections = {
        "data_args": {"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        "tuning_args": {"full_layers": 0, "bias_layers": 1},
        "pacing_args": {"grid": ["1,3,20", "2,2,10"], "val_examples": 30},
        "filter_args": {"knn": 5},
        **sections,
    }
    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": method, "comm_round": 4}, **sections)
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    return run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None), run_dir


@pytest.mark.slow
def test_fes_in_process_uses_all_three_designs(tmp_path, tiny_model_dir):
    summary, run_dir = _run(tmp_path, tiny_model_dir, "fes")
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert rows[0]["pacing"] == "<f=1, n=3, k=20%>"  # the list's first until the trials choose
    events = (run_dir / "events.log").read_text()
    assert "pacing trial <f=1, n=3, k=20%> on idle clients" in events and "pacing chose" in events
    labeled = [r for r in rows if r["inferred_fraction"]]
    assert labeled and all(float(r["inferred_fraction"]) < 1.0 for r in labeled)  # filtering skips part
    assert list((run_dir / "clients").glob("*/activations.pt"))  # co-planning's frozen bottom is cached
    assert list((run_dir / "clients").glob("*/proxy_embeddings.npy"))


@pytest.mark.slow
def test_fes_payload_is_smaller_than_fedfsl(tmp_path, tiny_model_dir):
    _, fes_dir = _run(tmp_path / "fes", tiny_model_dir, "fes")
    _, fsl_dir = _run(tmp_path / "fsl", tiny_model_dir, "fedfsl")

    def per_client(d):
        r = next(csv.DictReader((d / "metrics.csv").open()))
        return int(r["bytes_up"]) / len(r["clients"].split())

    assert per_client(fes_dir) * 1000 < per_client(fsl_dir)


@pytest.mark.slow
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


def test_knn_larger_than_a_pool_is_capped():
    pts, _ = _clusters([4, 4])
    assert knn_indices(pts, 150).shape == (8, 7)


def test_neighbourhoods_stay_local_on_small_pools():
    from fedml_fes.pseudo.filtering import neighbour_count

    assert neighbour_count(150, 1200, 0.125) == 150  # the artifact's AG News pools: the paper's k
    assert neighbour_count(150, 64, 0.125) == 8 and neighbour_count(150, 3, 0.125) == 1
    assert neighbour_count(150, 64, 1.0) == 64  # share 1: only knn_indices' pool - 1 cap


def test_vote_k_on_a_class_sorted_pool_smaller_than_k_is_not_its_stored_order(tmp_path):
    """A pool of at most k + 1 texts with k = 150: every V(x) was the whole pool, every sample
    scored the same and the 'ranking' was the stored order. Pools are stored by example id,
    which on BBC News is sorted by class, so the top 10% (the candidates) were one class."""
    from fedml_fes.pseudo.filtering import ProxyEmbedder

    pts, labels = _clusters([30, 20, 14])  # stored class by class, as a BBC News pool
    assert np.array_equal(vote_k_order(knn_indices(centred(pts), 150), 10.0), np.arange(64))  # the defect
    np.save(tmp_path / "proxy_embeddings.npy", pts)
    order = cached_order(
        tmp_path, ["t"] * 64, "vote_k", ProxyEmbedder("unused"), knn=150, rho=10.0, seed=0, pool_share=0.125
    )
    assert sorted(order.tolist()) == list(range(64))
    assert len(set(labels[order[:7]].tolist())) == 3  # the top 10% covers every cluster


def test_filter_ranks_mean_centred_embeddings(tmp_path):
    from fedml_fes.pseudo.filtering import ProxyEmbedder

    pts, _ = _clusters([6, 5, 4], dim=6)
    pts = pts + 50.0  # a shared offset, as sentence encoders have
    assert np.allclose(centred(pts).mean(axis=0), 0, atol=1e-4)
    np.save(tmp_path / "proxy_embeddings.npy", pts)
    order = cached_order(
        tmp_path, ["t"] * len(pts), "vote_k", ProxyEmbedder("unused"), knn=3, rho=10.0, seed=0, pool_share=1.0
    )
    assert np.array_equal(order, vote_k_order(knn_indices(centred(pts), 3), 10.0))


def test_default_plan_keeps_the_papers_top_third_bias_only():
    assert (plan_for(24, 0, -1).bias_layers, plan_for(24, 0, -1).frozen_bottom) == (8, 16)  # layers 16-23
    assert plan_for(6, 0, -1).bias_layers == 2 and plan_for(6, 1, 3).bias_layers == 3


# ---- the co-planning planner ----------------------------------------------------------------


def test_planner_binary_search_finds_shallowest_good_depth():
    from fedml_fes.tuning.planner import Probe, search_depth

    calls = []

    def probe(d):
        calls.append(d)
        return Probe(d, score=min(0.9, 0.5 + 0.1 * d), cost=float(d), payload_bytes=100 * d)

    result = search_depth(24, probe, tolerance=0.01)
    assert result.chosen.depth == 4 and result.reference.depth == 24
    assert len(calls) <= 7 and len(set(calls)) == len(calls)  # log2(24) probes, none repeated
    assert "(chosen)" in result.table()
    with pytest.raises(FesError, match="depth range"):
        search_depth(0, probe, 0.01)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["masked", "causal"])
def test_plan_command_on_tiny_model(tmp_path, tiny_model_dir, tiny_llama_dir, backbone):
    import subprocess
    import sys

    from .conftest import write_config

    raw = small_config(
        tmp_path,
        tiny_model_dir if backbone == "masked" else tiny_llama_dir,
        train_args={"method": "fes"},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pacing_args={"mode": "static", "val_signal": "log_likelihood" if backbone == "causal" else "accuracy"},
        filter_args={"method": "random"},
        prompt_args={"pattern_id": 0 if backbone == "causal" else 1},
    )
    cf = write_config(tmp_path / "c.yaml", raw)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedml_fes_plugins.cli.main",
            "plan",
            "--cf",
            str(cf),
            "--rounds",
            "1",
            "--out",
            str(tmp_path / "plan"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "chosen plan: tuning_args:" in out.stdout
    assert f"validation {'val_nll' if backbone == 'causal' else 'val_acc'} " in out.stdout  # the config's signal
    assert "the gold labels it trains on" in out.stdout  # static pacing holds none out, and says so
    assert (tmp_path / "plan" / "plan.json").is_file()
    assert all((d / "config.yaml").is_file() for d in (tmp_path / "plan").glob("depth*"))  # real run folders
    assert "WARNING" not in out.stderr


@pytest.mark.parametrize(
    "rounds,tolerance,max_depth,message",
    [(0, 0.01, 0, "--rounds must be >= 1"), (1, -1.0, 0, "--tolerance must be >= 0"), (1, 0.0, -3, "--max-depth")],
)
def test_plan_options_are_checked_first(rounds, tolerance, max_depth, message):
    from types import SimpleNamespace

    from fedml_fes_plugins.cli.plan import check_plan_options

    with pytest.raises(FesError, match=message):
        check_plan_options(SimpleNamespace(rounds=rounds, tolerance=tolerance, max_depth=max_depth))


def test_plan_refuses_methods_without_a_layer_plan(tmp_path, tiny_model_dir):
    from types import SimpleNamespace

    from fedml_fes_plugins.cli.plan import run_plan

    opts = SimpleNamespace(rounds=1, tolerance=0.01, max_depth=0, out=str(tmp_path / "plan"))
    for method, mode in (("fedfsl", "full"), ("fedfsl_bias", "bias")):
        cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, train_args={"method": method}))
        with pytest.raises(FesError, match=f"which {method} does not use .*trains '{mode}'"):
            run_plan(cfg, opts)
    assert not (tmp_path / "plan").exists()  # refused before anything ran
    (tmp_path / "a_file").write_text("")
    fes = config_from_dict(small_config(tmp_path, tiny_model_dir, train_args={"method": "fes"}))
    with pytest.raises(FesError, match="--out .*a_file: cannot create the folder"):
        run_plan(fes, SimpleNamespace(**{**vars(opts), "out": str(tmp_path / "a_file")}))


def test_plan_probes_hold_validation_labels_out(tmp_path, tiny_model_dir):
    """A config scoring AUG-E on its training labels (val_holdout 0) would make every probe tie at
    1.0 and the search pick the shallowest depth: probes hold the default quarter out instead."""
    from fedml_fes_plugins.cli.plan import probe_config

    raw = small_config(tmp_path, tiny_model_dir, train_args={"method": "fes"}, pacing_args={"val_holdout": 0})
    probed = probe_config(config_from_dict(raw), depth=2, rounds=1)
    assert probed.pacing.val_holdout == 0.25
    assert (probed.tuning.full_layers, probed.tuning.bias_layers, probed.train.comm_round) == (0, 2, 1)
    kept = config_from_dict({**raw, "pacing_args": {"val_holdout": 0.1}})
    assert probe_config(kept, depth=1, rounds=3).pacing.val_holdout == 0.1


def test_warmup_rounds_train_with_their_own_lr_and_epochs(tmp_path, tiny_model_dir):
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fes", "learning_rate": 1e-4, "epochs": 1},
        pseudo_args={"start_round": 2, "warmup_learning_rate": 3e-3, "warmup_epochs": 3},
    )
    cfg = config_from_dict(raw)
    warm, later = cfg.for_round(1, uses_pseudo=True).train, cfg.for_round(2, uses_pseudo=True).train
    assert (warm.learning_rate, warm.epochs) == (3e-3, 3)
    assert (later.learning_rate, later.epochs) == (1e-4, 1)
    assert cfg.for_round(0, uses_pseudo=False) is cfg  # no warm-up without pseudo labels
    biased = config_from_dict({**raw, "tuning_args": {"bias_learning_rate": 1e-3}})
    assert biased.for_round(2, True, bias_only=True).train.learning_rate == 1e-3
    assert biased.for_round(2, True, bias_only=False).train.learning_rate == 1e-4
    assert biased.for_round(2, True, bias_only=True, every_layer=True).train.learning_rate == 1e-3  # unset: the same
    every = config_from_dict({**raw, "tuning_args": {"bias_learning_rate": 1e-3, "all_bias_learning_rate": 2e-4}})
    assert every.for_round(2, True, bias_only=True, every_layer=True).train.learning_rate == 2e-4
    assert every.for_round(2, True, bias_only=True).train.learning_rate == 1e-3  # FeS's top third
    assert every.for_round(2, True, bias_only=False, every_layer=True).train.learning_rate == 1e-4
    assert biased.for_round(1, True, bias_only=True).train.learning_rate == 3e-3  # the warm-up's own wins
    longer = config_from_dict({**raw, "tuning_args": {"bias_epochs": 8}})
    assert longer.for_round(2, True, bias_only=True).train.epochs == 8
    assert longer.for_round(2, True, bias_only=False).train.epochs == 1
    assert longer.for_round(1, True, bias_only=True).train.epochs == 3  # the warm-up's own wins
    with pytest.raises(FesError, match="tuning_args.bias_epochs must be >= 0"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, tuning_args={"bias_epochs": -2}))
    with pytest.raises(FesError, match="warmup_learning_rate and warmup_epochs must be >= 0"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, pseudo_args={"warmup_epochs": -1}))


def test_candidates_are_a_fraction_of_the_pool_and_confidence_keeps_the_budget(tmp_path, tiny_model_dir):
    _, run_dir = _run(
        tmp_path,
        tiny_model_dir,
        "fes_no_dc",
        filter_args={"knn": 5, "candidate_fraction": 0.5},
        pacing_args={"f": 1, "n": 2, "k": 2},
    )
    rows = [r for r in csv.DictReader((run_dir / "metrics.csv").open()) if r["inferred"]]
    first = rows[0]
    assert 0.45 < float(first["inferred_fraction"]) < 0.6  # half of each pool inferred
    assert int(first["pseudo_labeled"]) < int(first["inferred"])  # confidence chose among them
    with pytest.raises(FesError, match="candidate_fraction must be in"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, filter_args={"candidate_fraction": 1.5}))


def test_candidate_fraction_defaults_to_the_papers_per_dataset_values(tmp_path, tiny_model_dir):
    from fedml_fes.runtime.methods import candidate_fraction

    for dataset, expected in (
        ("agnews", 0.1),
        ("yahoo_answers", 0.1),
        ("mnli", 0.2),
        ("yelp_review_full", 0.5),
        ("bbc_news", 0.1),
    ):
        cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, data_args={"dataset": dataset, "data_dir": "x"}))
        assert candidate_fraction(cfg) == expected
    cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, filter_args={"candidate_fraction": 0.3}))
    assert candidate_fraction(cfg) == 0.3


def _labels_held(run_dir, trial=False):
    import json

    name = "pseudo_labels.trial.json" if trial else "pseudo_labels.json"
    return {
        int(p.parent.name): len(json.loads(p.read_text())["example_ids"])
        for p in (run_dir / "clients").glob(f"*/{name}")
    }


def test_pacing_budget_follows_global_labeling_events(tmp_path, tiny_model_dir):
    """A client first sampled at the e-th event labels e x k% of its pool, not k%."""
    from fedml_fes.data.federated import build_federated_data

    _, run_dir = _run(tmp_path, tiny_model_dir, "fes_no_dc", pacing_args={"f": 1, "n": 2, "k": 10})
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    last_event = {}
    for event, r in enumerate(rows, start=1):
        for c in r["label_clients"].split():
            last_event[int(c)] = event
    cfg = config_from_dict(
        small_config(
            tmp_path, tiny_model_dir, data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12}
        )
    )
    pools = {c.client_id: len(c.unlabeled) for c in build_federated_data(cfg)[0].clients}
    held = _labels_held(run_dir)
    assert held == {c: budget_target(pools[c], 0.1 * e) for c, e in last_event.items()}
    assert any(e >= 2 and held[c] > budget_target(pools[c], 0.1) for c, e in last_event.items())


def test_fedfsl_static_pacing_holds_a_constant_count(tmp_path, tiny_model_dir):
    _, run_dir = _run(tmp_path, tiny_model_dir, "fedfsl", pseudo_args={"per_pass": 5, "label_clients": 8})
    assert set(_labels_held(run_dir).values()) == {5}  # every client labeled 4 times, holds 5, not 20


def test_trials_run_on_idle_clients_in_the_same_rounds(tmp_path, tiny_model_dir):
    _, run_dir = _run(tmp_path, tiny_model_dir, "fes", pacing_args={"grid": ["1,2,10", "2,1,20"], "val_examples": 30})
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    events = (run_dir / "events.log").read_text()
    assert events.count("on idle clients") == 2 and "pacing chose" in events
    first = rows[0]
    assert int(first["trial_updates"]) >= 1 and first["clients"]  # main training went on in the trial round
    trial_clients = {
        int(c)
        for line in events.splitlines()
        if "on idle clients" in line
        for c in line.split("[")[1].rstrip("]").split(",")
    }
    assert not trial_clients & {int(c) for c in first["clients"].split() + first["label_clients"].split()}
    assert set(_labels_held(run_dir, trial=True)) == trial_clients  # trial labels kept apart


def test_pacing_and_planner_never_score_on_test_data(tmp_path, tiny_model_dir):
    """Every evaluation but the scheduled test rounds uses the gold labels only."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.client import LocalTrainer
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import RoundServer

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fes", "comm_round": 3, "frequency_of_the_test": 3},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        pacing_args={"grid": ["1,2,10", "2,1,20"]},
        filter_args={"knn": 5},
        pseudo_args={"skip_if_worse_than_zero_shot": True},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    scored = []

    class Recording(FedAvgCore):
        def test(self, test_data, device, args):
            scored.append(test_data)
            return super().test(test_data, device, args)

    server = RoundServer(job, Recording(job), RunRecorder(run_dir, "test_acc"))
    trainer = LocalTrainer(job)
    for r in range(3):
        params = server.global_params()
        server.finish_labeling(r, _play(trainer, job, params, server.plan_labeling(r)))
        row = server.finish_round(r, _play(trainer, job, params, server.plan(r)))
    trained = {t for c in job.data.clients for t in c.gold_texts}
    held_out = set(job.data.validation.texts)
    on_test = [d for d in scored if d is job.data.test]
    assert len(on_test) == 2  # the zero-shot score and the last round's, nothing else
    others = [d for d in scored if d is not job.data.test]
    assert others and all(set(d.texts) == held_out for d in others)  # gold labels, none trained on
    assert not held_out & trained
    assert "val_acc" in row and row["val_acc"] == row["val_acc"]
    assert row["val_nll"] > 0  # the held-out labels' mean negative log-likelihood, beside their accuracy


def _data(labels_per_client):
    from fedml_fes.data.federated import ClientData, FederatedData, UnlabeledPool
    from fedml_fes.data.readers import LabeledTexts

    clients, n = [], 0
    for cid, labels in enumerate(labels_per_client):
        texts = tuple(f"text {n + j}" for j in range(len(labels)))
        clients.append(
            ClientData(
                cid,
                texts,
                tuple(labels),
                UnlabeledPool((f"pool {cid}",), (1000 + cid,)),
                gold_example_ids=tuple(range(n, n + len(labels))),
            )
        )
        n += len(labels)
    test = LabeledTexts(("t",), np.zeros(1, dtype=np.int64), ("a", "b"))
    return FederatedData("toy", ("a", "b"), tuple(clients), test)


def test_validation_hold_out_takes_a_seeded_stratified_share_of_the_gold_labels():
    from fedml_fes.data.federated import hold_out_validation

    data = _data([[0] * 12 + [1] * 4, [], [1] * 8])  # 24 gold labels: 12 of class a, 12 of class b
    out = hold_out_validation(data, 0.25, seed=3)
    val = out.validation
    assert len(val) == 6 and sorted(val.labels.tolist()) == [0, 0, 0, 1, 1, 1]  # per class
    trained = [t for c in out.clients for t in c.gold_texts]
    assert len(trained) == 18 and not set(trained) & set(val.texts)
    assert set(trained) | set(val.texts) == {t for c in data.clients for t in c.gold_texts}
    for before, after in zip(data.clients, out.clients):  # labels and ids stay with their texts
        pairs = dict(zip(before.gold_texts, zip(before.gold_labels, before.gold_example_ids)))
        assert all(pairs[t] == (y, i) for t, y, i in zip(after.gold_texts, after.gold_labels, after.gold_example_ids))
        assert after.unlabeled == before.unlabeled
    assert hold_out_validation(data, 0.25, seed=3).validation.texts == val.texts  # the same in every process
    assert hold_out_validation(data, 0.0, seed=3) is data


def test_validation_hold_out_leaves_at_least_one_gold_label_to_train_on():
    from fedml_fes.data.federated import hold_out_validation

    out = hold_out_validation(_data([[0, 1]]), 0.9, seed=0)
    assert len(out.validation) == 1 and out.clients[0].num_gold == 1
    one = hold_out_validation(_data([[1]]), 0.5, seed=0)
    assert one.validation is None and one.clients[0].num_gold == 1 and "too few" in one.notes[-1]


def test_only_a_method_that_decides_on_validation_holds_gold_labels_out(tmp_path, tiny_model_dir):
    """AUG-E scored on the labels FeS trains on saw validation accuracy 1.0 after a few rounds:
    every trial gained 0 and the cheapest configuration always won (fidelity runs, 2026-11-24).
    FeS now holds pacing_args.val_holdout of them out; FedFSL, which decides nothing, trains on all."""
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import gold_validation_set

    sections = dict(
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        tuning_args={"full_layers": 0, "bias_layers": 1},
    )
    jobs = {
        m: build_job(
            config_from_dict(small_config(tmp_path / m, tiny_model_dir, train_args={"method": m}, **sections)),
            "both",
            tmp_path / m,
        )
        for m in ("fes", "fedfsl")
    }
    fes, fedfsl = jobs["fes"].data, jobs["fedfsl"].data
    assert fedfsl.validation is None and sum(c.num_gold for c in fedfsl.clients) == 16
    assert len(fes.validation) == 4 and sum(c.num_gold for c in fes.clients) == 12
    all_gold = {t for c in fedfsl.clients for t in c.gold_texts}
    assert set(fes.validation.texts) | {t for c in fes.clients for t in c.gold_texts} == all_gold
    assert gold_validation_set(fes, 200, 0).texts == fes.validation.texts
    static = config_from_dict(
        small_config(
            tmp_path / "static",
            tiny_model_dir,
            train_args={"method": "fes"},
            pacing_args={"mode": "static"},
            **sections,
        )
    )
    assert build_job(static, "both", tmp_path / "static").data.validation is None  # nothing decides on it


@pytest.mark.parametrize("train_it", [True, False])
def test_class_bias_switch_decides_whether_it_trains_and_travels(tmp_path, tiny_model_dir, train_it):
    from fedml_fes.runtime.job import build_job

    cfg = config_from_dict(
        small_config(
            tmp_path,
            tiny_model_dir,
            train_args={"method": "fes"},
            tuning_args={"full_layers": 0, "bias_layers": 1},
            prompt_args={"train_class_bias": train_it},
        )
    )
    job = build_job(cfg, "both", tmp_path / "run")
    assert job.model.class_bias.requires_grad is train_it
    assert ("class_bias" in trainable_state(job.model)) is train_it


def test_class_report_shows_a_one_class_model():
    import numpy as np

    from fedml_fes.report.class_shift import class_report

    r = class_report(np.array([1, 1, 1, 1]), np.array([0, 1, 1, 2]), 4)
    assert r["confusion"] == [[0, 1, 0, 0], [0, 2, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]
    assert r["per_class_acc"][:3] == [0.0, 1.0, 0.0] and r["per_class_acc"][3] != r["per_class_acc"][3]
    assert r["majority_rate"] == 0.5


@pytest.mark.parametrize("sampling", ["uniform", "labels"])
def test_training_draw_follows_labels_held_under_label_sampling(tmp_path, tiny_model_dir, sampling):
    """pacing_args.train_sampling=labels: a client holding many labels trains far more often
    than ones holding a single pseudo label; uniform draws ignore the counts (FedAvg's draw)."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import RoundServer

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fes", "client_num_per_round": 1},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        filter_args={"knn": 5},
        pacing_args={"train_sampling": sampling},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    server = RoundServer(job, FedAvgCore(job), RunRecorder(run_dir, "test_acc"))
    gold = {c.client_id for c in job.data.clients if c.num_gold}
    others = [c.client_id for c in job.data.clients if not c.num_gold][:8]
    server.pseudo_counts = {c: 1 for c in others}  # eight clients with one pseudo label each
    draws = [server.sample_clients(r)[0] for r in range(200)]
    gold_share = np.mean([c in gold for c in draws])
    expected = len(gold) / (len(gold) + len(others))  # uniform
    if sampling == "labels":
        held = sum(c.num_gold for c in job.data.clients)
        assert gold_share == pytest.approx(held / (held + len(others)), abs=0.08) and gold_share > expected + 0.3
    else:
        assert gold_share == pytest.approx(expected, abs=0.1)
    with pytest.raises(FesError, match="train_sampling must be uniform or labels"):
        config_from_dict(small_config(tmp_path, tiny_model_dir, pacing_args={"train_sampling": "gold"}))


def test_pacing_only_keys_are_inert_for_methods_without_curriculum_pacing():
    from fedml_fes.runtime.inert import inert_keys, is_inert

    assert is_inert("pacing_args.train_sampling", inert_keys("fedfsl", "full"))
    assert is_inert("tuning_args.bias_epochs", inert_keys("fedfsl", "full"))
    assert not is_inert("pacing_args.train_sampling", inert_keys("fes", "full"))
    assert not is_inert("pacing_args.val_examples", inert_keys("fedfsl", "full"))
    assert is_inert("pacing_args.val_holdout", inert_keys("fedfsl", "full"))
    assert not is_inert("pacing_args.val_holdout", inert_keys("fes", "full"))
    assert not is_inert("pacing_args.val_holdout", inert_keys("adapter", "full"))
    assert not is_inert("tuning_args.bias_epochs", inert_keys("fes", "full"))


def test_the_every_layer_bias_rate_is_read_by_fedfsl_bias_alone():
    from fedml_fes.runtime.inert import inert_keys, is_inert

    assert not is_inert("tuning_args.all_bias_learning_rate", inert_keys("fedfsl_bias", "full"))
    for method in ("fes", "fes_no_dc", "fedfsl", "prompt_only", "adapter"):
        assert is_inert("tuning_args.all_bias_learning_rate", inert_keys(method, "full")), method
    assert not is_inert("tuning_args.bias_learning_rate", inert_keys("fes", "full"))
    # norm gains train only in a layer plan's bias-only layers: FeS reads them, BitFit does not
    assert not is_inert("tuning_args.norm_gains", inert_keys("fes", "full"))
    for method in ("fedfsl_bias", "fedfsl", "adapter"):
        assert is_inert("tuning_args.norm_gains", inert_keys(method, "full")), method
    # a class head trains only beside biases, on a prompt model
    for method in ("fes", "fedfsl_bias"):
        assert not is_inert("tuning_args.verbalizer_head", inert_keys(method, "full")), method
    for method, tuning in (("fedfsl", "full"), ("adapter", "full"), ("fedcls", "bias")):
        assert is_inert("tuning_args.verbalizer_head", inert_keys(method, tuning)), method


def test_where_the_mlm_head_comes_from_is_inert_for_methods_without_a_prompt():
    from fedml_fes.runtime.inert import inert_keys, is_inert

    for key in ("model_args.mlm_from", "model_args.mlm_on_job_data"):
        assert is_inert(key, inert_keys("fedcls", "full")) and is_inert(key, inert_keys("pseudo_only", "full"))
        for method in ("prompt_only", "fedfsl", "fes", "adapter"):
            assert not is_inert(key, inert_keys(method, "full")), (key, method)
    assert not is_inert("model_args.max_seq_length", inert_keys("fedcls", "full"))


def _one_trial_round(tmp_path, tiny_model_dir, baseline: str) -> dict:
    """Round 0 of a tiny FeS run with two pacing trials: the aggregations' senders, each trial's
    gain, the validation before and after the round and the new global tensors."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.client import LocalTrainer
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import RoundServer

    raw = small_config(
        tmp_path / baseline,
        tiny_model_dir,
        train_args={"method": "fes", "comm_round": 2, "client_num_per_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        tuning_args={"full_layers": 0, "bias_layers": 1},
        filter_args={"knn": 5},
        pseudo_args={"start_round": 0},
        pacing_args={"grid": ["1,2,10", "1,1,20"], "trial_baseline": baseline, "val_signal": "log_likelihood"},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    job = build_job(cfg, "both", run_dir)
    calls, gains = [], {}

    class Recording(FedAvgCore):
        def aggregate(self, raw, senders=None, on_reject=None, reference=None):
            calls.append(list(senders or []))
            return super().aggregate(raw, senders, on_reject, reference)

    server = RoundServer(job, Recording(job), RunRecorder(run_dir, "test_acc"))
    finish = server.pacer.finish_trial_round
    server.pacer.finish_trial_round = lambda r, g: (gains.update(g), finish(r, g))[1]
    trainer = LocalTrainer(job)
    params = server.global_params()
    server.finish_labeling(0, _play(trainer, job, params, server.plan_labeling(0)))
    tasks = server.plan(0)
    before = server.last_val
    server.finish_round(0, _play(trainer, job, params, tasks))
    return {
        "calls": calls,
        "trials": {t.client_id for t in tasks if "trial" in t.options},
        "main": {t.client_id for t in tasks if "trial" not in t.options},
        "gains": gains,
        "before": before,
        "after": server.last_val,
        "global": {k: v.clone() for k, v in server.global_params().items()},
    }


def test_a_pacing_trial_is_scored_with_the_rounds_main_updates(tmp_path, tiny_model_dir):
    """AUG-E's delta_acc for a trial: the round's main updates plus the trial group's, from the
    global model; never the trial group's few pseudo labels alone. Its baseline: the model the
    round started from, or (round_model) the one the round gives without any trial, so that
    trials of different rounds are not ranked by their round. The global model is the same."""
    runs = {b: _one_trial_round(tmp_path, tiny_model_dir, b) for b in ("previous_model", "round_model")}
    prev, paired = runs["previous_model"], runs["round_model"]
    assert prev["trials"] and prev["main"] and prev["trials"] == paired["trials"]
    main_names = {f"client {c}" for c in prev["main"]}
    for run in runs.values():
        trial_calls = [c for c in run["calls"] if {f"client {t}" for t in run["trials"]} & set(c)]
        assert trial_calls and all(main_names <= set(c) for c in trial_calls)
    assert set(prev["calls"][-1]) == main_names  # the global model after the trials: main updates only
    assert set(paired["calls"][0]) == main_names  # round_model: the round's global model first
    assert prev["gains"].keys() == paired["gains"].keys() and prev["gains"]
    for i, gain in prev["gains"].items():  # the same trial model, two baselines
        assert gain + prev["before"] == pytest.approx(paired["gains"][i] + paired["after"], abs=1e-6)
    assert prev["before"] == paired["before"] and prev["after"] == pytest.approx(paired["after"])
    assert abs(prev["after"] - prev["before"]) > 1e-4  # else the two baselines could not be told apart
    for name, tensor in prev["global"].items():
        assert torch.equal(tensor, paired["global"][name]), name


def test_loading_the_filtering_proxy_prints_no_weight_loading_bar(capfd):
    """The proxy loads at a run's first labeling event; transformers' 'Loading weights' bar
    landed between the round lines (seen in the demo's FeS rounds)."""
    from fedml_fes.pseudo.filtering import ProxyEmbedder

    assert ProxyEmbedder("offline:all-MiniLM-L6-v2").embed(["a short text"]).shape == (1, 384)
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err, err[-500:]


@pytest.mark.parametrize("by_labels, weight, held_each", [(False, 1.0, 1), (True, 1.0, 1), (True, 0.25, 4)])
def test_fedfsl_draws_by_labels_held_with_sample_by_labels(tmp_path, tiny_model_dir, by_labels, weight, held_each):
    """pseudo_args.sample_by_labels: FedFSL (static count pacing) draws trainers in proportion to
    the labels they hold, so the few gold clients are not crowded out by many clients holding a
    handful of pseudo labels; off, FedFSL draws uniformly (the paper's FedAvg draw). A pseudo
    label counts pseudo_args.sample_weight of a gold one: 4 at 0.25 draw as 1 at 1."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import RoundServer

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "client_num_per_round": 1},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
        pseudo_args={"sample_by_labels": by_labels, "sample_weight": weight},
    )
    cfg = config_from_dict(raw)
    job = build_job(cfg, "both", make_run_dir(cfg))
    server = RoundServer(job, FedAvgCore(job), RunRecorder(make_run_dir(cfg), "test_acc"))
    gold = {c.client_id for c in job.data.clients if c.num_gold}
    others = [c.client_id for c in job.data.clients if not c.num_gold][:8]
    server.pseudo_counts = {c: held_each for c in others}
    gold_share = np.mean([server.sample_clients(r)[0] in gold for r in range(200)])
    uniform = len(gold) / (len(gold) + len(others))
    if by_labels:
        held = sum(c.num_gold for c in job.data.clients)
        assert gold_share == pytest.approx(held / (held + len(others)), abs=0.08) and gold_share > uniform + 0.3
    else:
        assert gold_share == pytest.approx(uniform, abs=0.1)


@pytest.mark.parametrize("per_round", [3, 1])
def test_gold_every_round_puts_every_gold_holder_among_the_trainers(tmp_path, tiny_model_dir, per_round):
    """pseudo_args.gold_every_round: each round's trainers hold every gold-label client (as many
    as fit), the other places drawn among the pseudo-label holders; off, rounds leave gold out."""
    from fedml_fes.report.metrics import RunRecorder
    from fedml_fes.runtime.aggregator import FedAvgCore
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.server import RoundServer

    def draws(on: bool) -> tuple[list[list[int]], set[int], list[int]]:
        raw = small_config(
            tmp_path / str(on),
            tiny_model_dir,
            train_args={"method": "fedfsl", "client_num_per_round": per_round},
            data_args={"gold_labels": 16, "gold_sparsity": 0.001, "client_num_in_total": 12},
            pseudo_args={"gold_every_round": on},
        )
        cfg = config_from_dict(raw)
        job = build_job(cfg, "both", make_run_dir(cfg))
        server = RoundServer(job, FedAvgCore(job), RunRecorder(make_run_dir(cfg), "test_acc"))
        gold = {c.client_id for c in job.data.clients if c.num_gold}
        others = [c.client_id for c in job.data.clients if not c.num_gold][:8]
        server.pseudo_counts = {c: 5 for c in others}
        return [server.sample_clients(r) for r in range(60)], gold, others

    rounds, gold, others = draws(True)
    assert 1 <= len(gold) < 3, gold  # the fixture's skew: one or two gold clients
    for trainers in rounds:
        assert len(trainers) == per_round and len(set(trainers)) == per_round
        if per_round >= len(gold):
            assert gold <= set(trainers) and set(trainers) - gold <= set(others)
        else:
            assert set(trainers) <= gold
    if per_round > len(gold):
        assert len({t for r in rounds for t in r} - gold) > per_round  # the other places vary by round
    off, _, _ = draws(False)
    assert any(not gold <= set(t) for t in off)


@pytest.mark.slow
def test_fes_with_ia3_capacity_runs_on_a_masked_lm_with_its_frozen_cached_bottom(tmp_path, tiny_model_dir):
    """tuning_args.capacity ia3 on a BERT-style masked LM (biases of its own, frozen): the top
    layer's (IA)^3 vectors travel, no bias of a layer does, and the frozen bottom is still cached."""
    summary, run_dir = _run(tmp_path, tiny_model_dir, "fes", tuning_args={"bias_layers": 1, "capacity": "ia3"})
    assert summary["status"] == "completed"
    sent = torch.load(run_dir / "checkpoint.pt", weights_only=False)["server"]["global"]
    layer_tensors = {n.split("layer.")[1] for n in sent if ".layer." in n}
    assert layer_tensors == {
        "1.attention.self.key.ia3_l.default",
        "1.attention.self.value.ia3_l.default",
        "1.output.dense.ia3_l.default",
    }
    assert list((run_dir / "clients").glob("*/activations.pt"))

"""Pseudo-label selection, the per-client store, and pseudo-label rounds end to end."""

import csv
import json

import numpy as np
import pytest
import torch
import yaml

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.prompt.pvp import get_pvp
from fedml_fes.pseudo.labeler import (
    CONTENT_FREE,
    class_quotas,
    correct_bias,
    flexible_thresholds,
    select_classwise,
    select_pseudo,
)
from fedml_fes.pseudo.store import ClientStore, PseudoLabels
from fedml_fes.runtime.rundir import make_run_dir

from .conftest import small_config


def test_select_most_confident_with_threshold():
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.45, 0.55]])
    assert select_pseudo(probs, 2).tolist() == [0, 2]
    assert select_pseudo(probs, 10, threshold=0.7).tolist() == [0, 2]


def test_class_balance_quotas():
    assert class_quotas(5, np.array([1.0, 1.0])).sum() == 5
    probs = np.array([[0.99, 0.01], [0.98, 0.02], [0.97, 0.03], [0.4, 0.6]])
    kept = select_pseudo(probs, 2, balance="gold", gold_labels=[0, 1])
    assert sorted(kept.tolist()) == [0, 3]  # one per class although class 0 is more confident
    kept = select_pseudo(probs, 2, balance="predicted")
    assert kept.tolist() == [0, 1]


def test_store_roundtrip(tmp_path):
    store = ClientStore(tmp_path)
    assert len(store.load_pseudo(3)) == 0
    store.save_pseudo(3, PseudoLabels([5, 7], [1, 0], [], passes=1))
    assert store.load_pseudo(3) == PseudoLabels([5, 7], [1, 0], [], passes=1)


def _run(tmp_path, tiny_model_dir, method, pseudo_args=None):
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": method, "comm_round": 2},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args=pseudo_args or {"label_clients": 3, "per_pass": 10},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg)
    return run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None), run_dir


def test_fedfsl_pseudo_rounds_in_process(tmp_path, tiny_model_dir):
    summary, run_dir = _run(tmp_path, tiny_model_dir, "fedfsl")
    assert summary["status"] == "completed" and "test_acc" in summary["initial"]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert int(rows[0]["pseudo_labeled"]) == 30 and int(rows[1]["pseudo_total"]) > 30
    assert 0.0 <= float(rows[0]["pseudo_acc"]) <= 1.0 and rows[0]["client_mean_acc"]
    stored = [json.loads(p.read_text()) for p in (run_dir / "clients").glob("*/pseudo_labels.json")]
    assert stored and all(len(s["example_ids"]) <= 20 for s in stored)
    # training clients may now include label-only clients (pseudo holders)
    assert len(rows[1]["clients"].split()) >= 1


def test_fedfsl_bias_sends_only_biases(tmp_path, tiny_model_dir):
    full, full_dir = _run(tmp_path / "full", tiny_model_dir, "fedfsl")
    bias, bias_dir = _run(tmp_path / "bias", tiny_model_dir, "fedfsl_bias")
    up = lambda d: int(next(csv.DictReader((d / "metrics.csv").open()))["bytes_up"])  # noqa: E731
    per_client = lambda d: up(d) / len(next(csv.DictReader((d / "metrics.csv").open()))["clients"].split())  # noqa: E731
    assert per_client(bias_dir) * 20 < per_client(full_dir)


@pytest.mark.parametrize("method", ["prompt_only", "pseudo_only"])
def test_ablations_run(tmp_path, tiny_model_dir, method):
    summary, run_dir = _run(tmp_path, tiny_model_dir, method)
    assert summary["status"] == "completed"
    has_pseudo = (run_dir / "clients").exists()
    assert has_pseudo == (method == "pseudo_only")


def test_soft_labels_and_threshold(tmp_path, tiny_model_dir):
    summary, run_dir = _run(
        tmp_path,
        tiny_model_dir,
        "fedfsl",
        pseudo_args={
            "label_clients": 2,
            "per_pass": 5,
            "soft_labels": True,
            "confidence_threshold": 0.0,
            "class_balance": "predicted",
        },
    )
    stored = [json.loads(p.read_text()) for p in (run_dir / "clients").glob("*/pseudo_labels.json")]
    assert all(len(s["probs"]) == len(s["labels"]) for s in stored)


# ---- labelers: the model's label bias corrected before selection ---------------------------------


def test_paper_labeler_leaves_the_predictions_as_they_are():
    probs = np.array([[0.7, 0.3], [0.6, 0.4]], dtype=np.float32)
    assert correct_bias(probs, "paper") is probs


def test_contextual_labeler_divides_out_the_content_free_answer():
    """A model that says class 0 to no content at all (0.8) has its class-0 answers discounted:
    a 0.7 for class 0 on a real text is evidence for class 1 once that bias is removed."""
    probs = np.array([[0.7, 0.3], [0.95, 0.05]], dtype=np.float32)
    out = correct_bias(probs, "contextual", np.array([0.8, 0.2]))
    assert out.argmax(1).tolist() == [1, 0]  # 0.7/0.8 < 0.3/0.2; 0.95/0.8 > 0.05/0.2
    assert np.allclose(out.sum(1), 1.0) and out.dtype == probs.dtype
    assert np.allclose(out[0], [0.875 / (0.875 + 1.5), 1.5 / (0.875 + 1.5)], atol=1e-6)
    with pytest.raises(ValueError, match="content-free"):
        correct_bias(probs, "contextual")
    with pytest.raises(ValueError, match="unknown labeler"):
        correct_bias(probs, "oracle")


def test_aligned_labeler_makes_the_pools_mean_prediction_uniform_in_ranking():
    """Distribution alignment: a pool where every text leans to class 0 gets its least class-0
    texts labeled class 1 (the pool's own mean is the bias divided out)."""
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.55, 0.45]], dtype=np.float32)
    out = correct_bias(probs, "aligned")
    assert probs.argmax(1).tolist() == [0, 0, 0, 0] and out.argmax(1).tolist() == [0, 0, 1, 1]


def test_flexmatch_lowers_the_bar_for_classes_the_model_has_not_learned():
    """FlexMatch's class thresholds: a class the model answers with confidence on most of the
    pool keeps tau (0.95), classes it never answers with confidence get 0, and the budget goes to
    the predictions furthest above their class's threshold, so the unlearned classes get labels."""
    probs = np.array([[0.99, 0.01, 0.0]] * 6 + [[0.2, 0.7, 0.1], [0.3, 0.6, 0.1], [0.9, 0.05, 0.05]])
    thresholds = flexible_thresholds(probs)
    assert np.allclose(thresholds, [0.95, 0.0, 0.0])  # 6 of 9 confident class-0 answers: beta 1
    assert select_pseudo(probs, 3).tolist() == [0, 1, 2]  # the paper's: the three most confident
    assert select_pseudo(probs, 3, class_thresholds=thresholds).tolist() == [6, 7, 0]
    # a class-0 answer below class 0's threshold is never kept, budget or not
    assert 8 not in select_pseudo(probs, 9, class_thresholds=thresholds).tolist()
    assert len(select_pseudo(probs, 9, class_thresholds=thresholds)) == 8
    # warm-up: while most of the pool is unconfident, every threshold stays low (1 of 10 above tau)
    early = np.array([[0.97, 0.03]] + [[0.6, 0.4]] * 9)
    beta = 1 / 9
    assert np.allclose(flexible_thresholds(early), [0.95 * beta / (2 - beta), 0.0])
    assert correct_bias(probs, "flexmatch") is probs  # it changes the selection, not the probabilities


def test_classwise_gives_every_class_its_share_even_one_the_model_never_answers():
    """Class 2 is nobody's argmax, yet the texts most probable for it are picked for it; the
    budget's remainder goes to the classes with the most probability mass; a text is taken once,
    by the class whose turn reaches it first; the threshold applies to the picked class."""
    probs = np.array(
        [
            [0.90, 0.05, 0.05],  # 0
            [0.80, 0.10, 0.10],  # 1
            [0.50, 0.10, 0.40],  # 2: class 2's best
            [0.10, 0.85, 0.05],  # 3
            [0.45, 0.20, 0.35],  # 4: class 2's second
            [0.60, 0.38, 0.02],  # 5
        ]
    )
    assert 2 not in probs.argmax(1)
    keep, labels = select_classwise(probs, 3)
    assert dict(zip(keep.tolist(), labels.tolist())) == {0: 0, 3: 1, 2: 2}
    assert keep.tolist() == [0, 3, 2]  # most probable pick first
    keep, labels = select_classwise(probs, 5)  # 5 = 1 each + 2 to classes 0 and 1 (most mass)
    assert dict(zip(keep.tolist(), labels.tolist())) == {0: 0, 1: 0, 3: 1, 5: 1, 2: 2}
    keep, labels = select_classwise(probs, 6, threshold=0.3)  # class 1 has one text >= 0.3 left after 3
    assert sorted(zip(keep.tolist(), labels.tolist())) == [(0, 0), (1, 0), (2, 2), (3, 1), (4, 2), (5, 1)]
    keep, labels = select_classwise(probs, 6, threshold=0.5)
    assert sorted(zip(keep.tolist(), labels.tolist())) == [(0, 0), (1, 0), (3, 1)]
    assert select_classwise(probs, 0)[0].tolist() == [] and len(select_classwise(probs, 99)[0]) == 6
    assert correct_bias(probs, "classwise") is probs


def test_ensemble_labeler_averages_every_built_in_pattern_with_its_own_words(tmp_path, tiny_model_dir):
    """PET's ensemble: a pass's probabilities are the mean of the model's answers under each
    of the dataset's patterns, each read at its own verbalizer words; the model reads its own
    pattern's words again afterwards."""
    from fedml_fes.precision import autocast_for
    from fedml_fes.prompt.classifier import predict_proba
    from fedml_fes.pseudo.store import PseudoLabels
    from fedml_fes.runtime.job import build_job

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl"},
        pseudo_args={"labeler": "ensemble", "per_pass": 5, "soft_labels": True},
    )
    cfg = config_from_dict(raw)
    job = build_job(cfg, "both", make_run_dir(cfg))
    method, model = job.method, job.model
    patterns = get_pvp("bbc_news").patterns
    assert len(method.views) == len(patterns) >= 2
    own = model.verbalizer_ids.clone()
    client = next(c for c in job.data.clients if len(c.unlabeled))
    labels, inferred = method.label(model, client, cfg, job.device, PseudoLabels([], [], []), tmp_path, {})
    assert inferred == len(client.unlabeled) * len(patterns)  # one inference per pattern, counted
    assert torch.equal(model.verbalizer_ids, own)

    autocast = autocast_for(cfg.common.precision, job.device)  # bfloat16 where the CPU has it, as the pass

    def one(view):
        adapter, ids = view
        with model.reading(ids):
            return predict_proba(
                model, adapter, client.unlabeled.texts, None, batch_size=8, device=job.device, autocast=autocast
            )

    mean = np.mean([one(v) for v in method.views], axis=0)
    first = labels.example_ids[0]
    row = list(client.unlabeled.example_ids).index(first)
    assert np.allclose(labels.probs[0], mean[row], atol=1e-5)
    assert labels.labels[0] == int(mean[row].argmax()) and float(mean[row].max()) == pytest.approx(
        mean.max(1).max(), abs=1e-6
    )
    assert not np.allclose(one(method.views[0]), one(method.views[1]))  # the views differ


def test_ensemble_labeler_refuses_what_it_cannot_average(tmp_path, tiny_model_dir):
    from fedml_fes.runtime.job import build_job

    def job(**sections):
        cfg = config_from_dict(small_config(tmp_path, tiny_model_dir, **sections))
        return build_job(cfg, "both", make_run_dir(cfg))

    with pytest.raises(FesError, match="prompt_args.pattern sets your own"):
        job(
            train_args={"method": "fedfsl"},
            pseudo_args={"labeler": "ensemble"},
            prompt_args={
                "pattern": "{text_a} It is about {mask}.",
                "verbalizer": {c: c.title() for c in ("business", "entertainment", "politics", "sports", "tech")},
            },
        )
    with pytest.raises(FesError, match="pseudo_only labels with a head classifier"):
        job(train_args={"method": "pseudo_only"}, pseudo_args={"labeler": "ensemble"})
    reading = job(train_args={"method": "fedfsl"}).model.reading
    with pytest.raises(ValueError, match="verbalizer ids for 5 classes"):
        with reading([1, 2]):
            pass


def test_labeler_options_are_checked_in_one_line():
    with pytest.raises(
        FesError, match="pseudo_args.labeler must be one of paper, contextual, aligned, ensemble, flexmatch, classwise"
    ):
        config_from_dict({"pseudo_args": {"labeler": "knn"}})
    with pytest.raises(FesError, match=r"pseudo_args.per_pass_fraction must be in \[0, 1\]"):
        config_from_dict({"pseudo_args": {"per_pass_fraction": 1.5}})


@pytest.mark.parametrize("labeler", ["contextual", "aligned", "ensemble", "flexmatch", "classwise"])
def test_fedfsl_with_a_labeler_keeps_a_fraction_of_each_pool_and_counts_its_inference(
    tmp_path, tiny_model_dir, monkeypatch, labeler
):
    """per_pass_fraction: each labeling client keeps that share of its pool (at least one); the
    contextual labeler's content-free inputs are inferred on the client too, so they are counted.
    flexmatch: the pass sees every fourth text as a less confident class 1 (0.6) and the rest as
    class 0 at 0.99, so the budget (a quarter) goes to class 1, which the paper's ranking leaves out.
    classwise: the same pass; every class gets a share, class 1's the texts it leans to, and the
    stored targets are one-hot (hard), class 2 included though no text leans to it."""
    if labeler in ("flexmatch", "classwise"):
        from fedml_fes.runtime import methods

        def skewed(probs, *_):
            out = np.zeros_like(probs)
            out[:, 0], out[::4, 0], out[::4, 1] = 0.99, 0.4, 0.6
            out[:, 2] = 1.0 - out[:, 0] - out[:, 1]
            return out

        monkeypatch.setattr(methods, "correct_bias", skewed)
    summary, run_dir = _run(
        tmp_path,
        tiny_model_dir,
        "fedfsl",
        pseudo_args={"label_clients": 3, "per_pass_fraction": 0.25, "labeler": labeler, "soft_labels": True},
    )
    assert summary["status"] == "completed"
    from fedml_fes.data.federated import build_federated_data

    data = build_federated_data(config_from_dict(yaml.safe_load((run_dir / "config.yaml").read_text())))[0]
    pools = {c.client_id: len(c.unlabeled) for c in data.clients}
    extra = len(CONTENT_FREE) if labeler == "contextual" else 0
    views = len(get_pvp("bbc_news").patterns) if labeler == "ensemble" else 1  # one inference per pattern
    passes = [r for r in csv.DictReader((run_dir / "metrics.csv").open()) if r["label_clients"]]
    assert passes
    for r in passes:
        ids = [int(c) for c in r["label_clients"].split()]
        assert int(r["pseudo_labeled"]) == sum(max(1, -(-pools[c] // 4)) for c in ids)
        assert int(r["inferred"]) == sum(pools[c] * views + extra for c in ids)
    costs = [r for r in csv.DictReader((run_dir / "client_costs.csv").open()) if r["phase"] == "label"]
    assert sum(int(r["examples"]) for r in costs) == sum(int(r["inferred"]) for r in passes)  # and in the cost rows
    stored = [json.loads(p.read_text()) for p in (run_dir / "clients").glob("*/pseudo_labels.json")]
    assert stored and all(np.allclose(np.sum(s["probs"], axis=1), 1.0, atol=1e-4) for s in stored)
    if labeler == "flexmatch":
        assert all(set(s["labels"]) == {1} for s in stored)  # the paper's ranking: all class 0
    if labeler == "classwise":
        assert {c for s in stored for c in s["labels"]} >= {0, 1, 2}
        assert all(
            np.array_equal(np.eye(len(row))[lab], row) for s in stored for lab, row in zip(s["labels"], s["probs"])
        )


def test_word_dropout_is_seeded_keeps_a_word_and_is_off_at_zero():
    import torch

    from fedml_fes.pseudo.augment import drop_words

    texts = ["one two three four five six seven eight", "single", "a b"]
    assert drop_words(texts, 0.0, torch.Generator().manual_seed(0)) == texts
    a = drop_words(texts, 0.5, torch.Generator().manual_seed(0))
    assert a == drop_words(texts, 0.5, torch.Generator().manual_seed(0))  # the seed decides
    assert a != texts and a[1] == "single"
    assert all(set(x.split()) <= set(t.split()) and x for x, t in zip(a, texts))
    almost_all = drop_words(texts, 0.999, torch.Generator().manual_seed(1))
    assert all(len(x.split()) >= 1 for x in almost_all)
    with pytest.raises(FesError, match=r"pseudo_args.augment_word_dropout must be in \[0, 1\)"):
        config_from_dict({"pseudo_args": {"augment_word_dropout": 1.0}})


def test_fedfsl_trains_on_augmented_pseudo_labels(tmp_path, tiny_model_dir, monkeypatch):
    """The pass labels the clean text; training sees the pseudo-labeled texts with words dropped
    (the gold texts as they are)."""
    from fedml_fes.runtime import methods

    seen: list[list[str]] = []
    real = methods.train_examples

    def spy(model, adapter, texts_a, *args, **kwargs):
        seen.append(list(texts_a))
        return real(model, adapter, texts_a, *args, **kwargs)

    monkeypatch.setattr(methods, "train_examples", spy)
    summary, run_dir = _run(
        tmp_path,
        tiny_model_dir,
        "fedfsl",
        pseudo_args={"label_clients": 3, "per_pass": 10, "augment_word_dropout": 0.5},
    )
    assert summary["status"] == "completed"
    from fedml_fes.data.federated import build_federated_data

    data = build_federated_data(config_from_dict(yaml.safe_load((run_dir / "config.yaml").read_text())))[0]
    pool = {t for c in data.clients for t in c.unlabeled.texts}
    gold = {t for c in data.clients for t in c.gold_texts}
    trained = [t for batch in seen for t in batch]
    assert gold & set(trained)  # gold texts untouched
    shortened = [t for t in trained if t not in pool and t not in gold]
    assert shortened  # pseudo-labeled texts arrive with words dropped


def test_class_balanced_weights_give_each_present_class_the_same_total():
    from fedml_fes.prompt.classifier import class_balanced_weights

    y = [3, 3, 3, 3, 3, 3, 0, 1]  # a skewed few-shot set: six of one class
    w = class_balanced_weights(y)
    assert w.mean() == pytest.approx(1.0)
    totals = {c: float(w[np.asarray(y) == c].sum()) for c in set(y)}
    assert len(set(round(t, 6) for t in totals.values())) == 1  # 8 / 3 each
    assert w[0] < 1.0 < w[-1]
    assert class_balanced_weights([]).shape == (0,)


@pytest.mark.parametrize(
    "balance_gold, balance_pseudo, sample_weight", [(True, False, 1.0), (False, True, 1.0), (False, True, 0.25)]
)
def test_class_balanced_loss_weights_the_rows_it_names(
    tmp_path, tiny_model_dir, monkeypatch, balance_gold, balance_pseudo, sample_weight
):
    """train_args.balance_gold_classes: the gold rows get the class-balanced weights, the pseudo
    rows 1; pseudo_args.balance_classes: the other way round, over the client's pseudo labels;
    pseudo_args.sample_weight scales the pseudo rows and their share of FedAvg's sample count.
    The weights enter the loss (a doubled weight doubles it before any step)."""
    import torch

    from fedml_fes.prompt.classifier import class_balanced_weights
    from fedml_fes.runtime import methods

    calls: list[tuple[np.ndarray, np.ndarray | None]] = []
    counts: list[float] = []
    real = methods.train_examples
    real_local_train = methods.FewShot.local_train

    def count(self, *args, **kwargs):
        weight, metrics = real_local_train(self, *args, **kwargs)
        counts.append(weight)
        return weight, metrics

    def spy(model, adapter, texts_a, texts_b, targets, **kwargs):
        calls.append((targets, kwargs.get("weights")))
        if kwargs.get("weights") is not None and not hasattr(spy, "checked"):
            spy.checked = True
            state = {k: v.clone() for k, v in model.state_dict().items()}
            frozen = dict(kwargs, lr=0.0, epochs=1, generator=torch.Generator().manual_seed(0))
            torch.manual_seed(0)  # the same dropout masks in both passes
            one = real(model, adapter, texts_a, texts_b, targets, **{**frozen, "weights": None})
            torch.manual_seed(0)
            frozen["generator"] = torch.Generator().manual_seed(0)
            two = real(model, adapter, texts_a, texts_b, targets, **{**frozen, "weights": np.full(len(targets), 2.0)})
            assert two["train_loss"] == pytest.approx(2 * one["train_loss"], rel=1e-5)
            model.load_state_dict(state)
        return real(model, adapter, texts_a, texts_b, targets, **kwargs)

    monkeypatch.setattr(methods, "train_examples", spy)
    monkeypatch.setattr(methods.FewShot, "local_train", count)
    if balance_pseudo:  # the tiny model labels everything as one class: draw varied labels instead
        rng = np.random.default_rng(0)
        monkeypatch.setattr(
            methods, "correct_bias", lambda probs, *_: rng.dirichlet(np.ones(probs.shape[1]), len(probs))
        )
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 2, "balance_gold_classes": balance_gold},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        # soft labels: the pseudo rows tell apart from the gold ones
        pseudo_args={
            "label_clients": 3,
            "per_pass": 10,
            "soft_labels": True,
            "balance_classes": balance_pseudo,
            "sample_weight": sample_weight,
        },
    )
    cfg = config_from_dict(raw)
    summary = run_in_process(cfg, make_run_dir(cfg), progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed" and getattr(spy, "checked", False)
    saw_pseudo = False
    assert len(counts) == len(calls)
    for (targets, weights), weight in zip(calls, counts):
        hard = np.isclose(targets.max(1), 1.0)
        n_gold = int(np.argmin(hard)) if not hard.all() else len(targets)
        if not balance_gold and n_gold == len(targets):
            assert weights is None  # gold rows only, nothing to balance
            continue
        assert weights is not None and len(weights) == len(targets)
        gold, pseudo = targets[:n_gold].argmax(1), targets[n_gold:].argmax(1)
        assert np.allclose(weights[:n_gold], class_balanced_weights(gold) if balance_gold else 1.0)
        expected = class_balanced_weights(pseudo) if balance_pseudo else np.ones(len(pseudo))
        assert np.allclose(weights[n_gold:], sample_weight * expected)
        assert weight == pytest.approx(n_gold + sample_weight * len(pseudo))  # FedAvg's sample count
        saw_pseudo |= len(pseudo) > 0 and (not balance_pseudo or len(set(pseudo)) > 1)
    assert saw_pseudo


class _RowsAdapter:
    """A stand-in adapter: each text is an index into fixed feature rows."""

    def __init__(self, features: torch.Tensor):
        self.features = features

    def batch(self, texts_a, texts_b=None):
        return {"x": self.features[[int(t) for t in texts_a]]}

    def logits(self, model, batch):
        return model(batch["x"])


def test_restricted_softmax_leaves_the_classes_a_client_lacks_untouched():
    """train_args.restricted_softmax (FedRS at alpha 0): with targets naming classes 0 and 1 only,
    class 2's weights get no gradient and stay as they were; the plain softmax pushes them. The
    loss is the cross-entropy over the softmax of the present classes, soft mass on class 2 dropped."""
    from fedml_fes.prompt.classifier import present_classes, train_examples

    features = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    targets = np.array([[1, 0, 0], [0, 1, 0], [0.7, 0.1, 0.2], [0.2, 0.7, 0.1], [1, 0, 0], [0, 1, 0]], np.float32)
    assert present_classes(targets).tolist() == [True, True, False]
    texts = [str(i) for i in range(6)]

    def trained(classes, lr=0.1):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        out = train_examples(
            model, _RowsAdapter(features), texts, None, targets, epochs=2, batch_size=6, lr=lr,
            weight_decay=0.0, generator=torch.Generator().manual_seed(0), device=torch.device("cpu"),
            classes=classes,
        )  # fmt: skip
        return model, before, out

    model, before, out = trained(present_classes(targets))
    assert torch.equal(model.weight[2], before["weight"][2]) and torch.equal(model.bias[2], before["bias"][2])
    assert not torch.equal(model.weight[0], before["weight"][0])
    plain, before_plain, _ = trained(None)
    assert not torch.equal(plain.weight[2], before_plain["weight"][2])
    _, before, first = trained(present_classes(targets), lr=0.0)
    model = torch.nn.Linear(4, 3)
    model.load_state_dict(before)
    logp = torch.log_softmax(model(features)[:, :2], dim=-1)
    y = torch.as_tensor(targets[:, :2]) / torch.as_tensor(targets[:, :2]).sum(1, keepdim=True)
    assert first["train_loss"] == pytest.approx(float(-(y * logp).sum(1).mean()), rel=1e-5)


@pytest.mark.parametrize("restricted", [True, False])
def test_restricted_softmax_option_passes_each_clients_own_classes(tmp_path, tiny_model_dir, monkeypatch, restricted):
    """Each local update of a FedFSL run gets the classes its own gold and pseudo labels name
    when train_args.restricted_softmax is on, and no restriction when it is off."""
    from fedml_fes.prompt.classifier import present_classes
    from fedml_fes.runtime import methods
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    calls: list[tuple[np.ndarray, object]] = []
    real = methods.train_examples

    def spy(model, adapter, texts_a, texts_b, targets, **kwargs):
        calls.append((targets, kwargs.get("classes")))
        return real(model, adapter, texts_a, texts_b, targets, **kwargs)

    monkeypatch.setattr(methods, "train_examples", spy)
    raw = small_config(
        tmp_path,
        tiny_model_dir,
        train_args={"method": "fedfsl", "comm_round": 2, "restricted_softmax": restricted},
        data_args={"gold_labels": 16, "gold_sparsity": 0.001},
        pseudo_args={"label_clients": 3, "per_pass": 10},
    )
    cfg = config_from_dict(raw)
    summary = run_in_process(cfg, make_run_dir(cfg), progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed" and calls
    for targets, classes in calls:
        if restricted:
            assert np.array_equal(classes, present_classes(targets))
        else:
            assert classes is None
    assert not restricted or any(not c.all() for _, c in calls)  # some client lacks a class

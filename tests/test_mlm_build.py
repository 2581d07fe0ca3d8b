"""The FedBERT-style MLM build: lr schedule, batching, which text it trains on, progress."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.pretrain.cache import mlm_cache_key
from fedml_fes.pretrain.mlm import (
    build_steps,
    length_grouped_batch,
    length_order,
    lr_factor,
    masked_token_accuracy,
    sentence_chunks,
    tokenize_texts,
    train_mlm,
    unigram_log_prior,
)
from fedml_fes.runtime.rundir import make_run_dir
from fedml_fes.runtime.tasks import task_seed

from .conftest import save_tiny_bert, small_config, write_config


@pytest.fixture(scope="module")
def mlm_model_dir(tmp_path_factory) -> str:
    """2 layers, hidden 64: enough capacity for the schedule tests to show learning."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), hidden=64)


def _raw(tmp_path, model_dir, **mlm):
    return small_config(
        tmp_path,
        model_dir,
        train_args={
            "method": "fedbert_mlm",
            "comm_round": 3,
            "client_num_per_round": 1,
            "batch_size": 4,
            "learning_rate": 0.001,
        },
        mlm_args={"local_steps": 4, "heldout_texts": 20, **mlm},
    )


# -- learning-rate schedule ------------------------------------------------------------------


def test_lr_factor_warms_up_then_decays_to_zero():
    assert [lr_factor(s, 100, 10, "linear") for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert lr_factor(10, 100, 10, "linear") == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, "linear") == pytest.approx(0.5)
    assert lr_factor(99, 100, 10, "linear") == pytest.approx(1 / 90)
    assert lr_factor(55, 100, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(32, 100, 10, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi * 22 / 90)))
    assert lr_factor(99, 100, 10, "constant") == 1.0 and lr_factor(3, 100, 10, "constant") == 0.4
    assert lr_factor(0, 100, 0, "linear") == 1.0  # no warm-up: the peak at once
    assert lr_factor(150, 100, 0, "cosine") == pytest.approx(0.0)  # never negative past the end
    with pytest.raises(FesError, match="schedule"):
        lr_factor(0, 10, 0, "step")


def test_build_steps_and_bad_settings_are_one_line_errors(tmp_path, mlm_model_dir):
    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir, warmup_fraction=0.25))
    assert build_steps(cfg) == (12, 3)
    from fedml_fes.runtime.fedbert import FedBertMlm

    for bad in ({"lr_schedule": "step"}, {"warmup_fraction": 1.0}, {"train_mask_probability": 1.5}, {"dropout": 1.0}):
        with pytest.raises(FesError, match="mlm_args"):
            FedBertMlm().build_model(config_from_dict(_raw(tmp_path, mlm_model_dir, **bad)), (), None)


def test_each_round_trains_at_its_place_in_the_build_schedule(tmp_path, mlm_model_dir):
    """A client task reads its round off the task seed: the lr it uses is the schedule's."""
    from fedml_fes.data.federated import build_federated_data
    from fedml_fes.models import build_masked_lm, load_tokenizer
    from fedml_fes.runtime.fedbert import FedBertMlm

    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir, lr_schedule="linear", warmup_fraction=0.25))
    data, _ = build_federated_data(cfg)
    tok = load_tokenizer(mlm_model_dir)
    model = build_masked_lm(mlm_model_dir, 0)
    method = FedBertMlm()
    client = data.clients[0]
    seen = []
    for r in range(3):
        gen = torch.Generator().manual_seed(task_seed(0, r, client.client_id))
        _, metrics = method.local_train(model, tok, client, cfg, gen, torch.device("cpu"), None)
        seen.append((metrics["lr_first"], metrics["lr_last"]))
    # 12 steps (4 a round), 3 of warm-up, peak 1e-3: steps 0-2 -> 1/3, 2/3, 1; then
    # step s -> 1 - (s - 3)/9, so step 3 -> 1 and the last, step 11 -> 1/9
    expected = [(1 / 3, 1), (1 - 1 / 9, 1 - 4 / 9), (1 - 5 / 9, 1 - 8 / 9)]
    assert seen == [pytest.approx((a * 1e-3, b * 1e-3)) for a, b in expected]
    with pytest.raises(FesError, match="lr schedule"):  # a generator no task seeded
        method.local_train(model, tok, client, cfg, torch.Generator().manual_seed(7), torch.device("cpu"), None)


# -- initial model -------------------------------------------------------------------------


def test_unigram_log_prior_counts_text_tokens_only():
    prior = unigram_log_prior([[101, 5, 5, 7, 102], [101, 5, 102]], vocab_size=10)
    # tokens 5, 5, 7, 5 (CLS/SEP dropped), add-one over 10 ids: (3+1)/14, (1+1)/14, 1/14
    assert prior[5] == pytest.approx(math.log(4 / 14)) and prior[7] == pytest.approx(math.log(2 / 14))
    assert prior[0] == pytest.approx(math.log(1 / 14)) and torch.exp(prior).sum() == pytest.approx(1.0)


def test_build_starts_from_the_clients_unigram_bias_without_dropout(tmp_path, mlm_model_dir):
    from torch import nn

    from fedml_fes.data.federated import build_federated_data
    from fedml_fes.models import load_tokenizer
    from fedml_fes.runtime.fedbert import FedBertMlm

    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir, unigram_bias=True, dropout=0.0, train_vocab=50))
    tok = load_tokenizer(mlm_model_dir)
    method = FedBertMlm()
    model = method.build_model(cfg, (), tok)
    data, _ = build_federated_data(cfg)
    texts = [t for c in data.clients for t in sentence_chunks(c.all_texts())]
    expected = unigram_log_prior(tokenize_texts(tok, texts, cfg.model.max_seq_length), len(tok))
    assert torch.allclose(model.cls.predictions.bias, expected)
    assert method._vocab.tolist() == sorted(torch.argsort(expected, descending=True, stable=True)[:50].tolist())
    assert model.get_output_embeddings().weight is model.bert.embeddings.word_embeddings.weight  # still tied
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, nn.Dropout))
    assert model.config.hidden_dropout_prob == 0.1  # what is saved keeps the model's own
    plain = FedBertMlm().build_model(config_from_dict(_raw(tmp_path, mlm_model_dir)), (), tok)
    assert not plain.cls.predictions.bias.any() and any(m.p > 0 for m in plain.modules() if isinstance(m, nn.Dropout))


def test_candidate_softmax_is_the_full_one_over_all_ids_and_keeps_every_target(mlm_model_dir):
    from torch import nn

    from fedml_fes.models import build_masked_lm, load_tokenizer
    from fedml_fes.pretrain.mlm import _candidate_loss, _masked_logits, frequent_vocab

    tok = load_tokenizer(mlm_model_dir)
    model = build_masked_lm(mlm_model_dir, 0).eval()
    batch = tok(["the cat sat on the mat.", "a zyzzyva is a weevil."], padding=True, return_tensors="pt")
    targets = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    targets[:, 2:5] = True
    masked = batch["input_ids"].masked_fill(targets, tok.mask_token_id)
    full = nn.functional.cross_entropy(_masked_logits(model, batch, masked, targets), batch["input_ids"][targets])
    every = torch.arange(len(tok))
    assert float(_candidate_loss(model, batch, masked, targets, every)) == pytest.approx(float(full), rel=1e-5)
    few = _candidate_loss(model, batch, masked, targets, torch.tensor([1996, 1037]))  # "the", "a" + targets
    assert torch.isfinite(few) and float(few) < float(full)  # fewer competitors: a smaller loss
    counts = np.zeros(10)
    counts[[7, 2, 5]] = [5, 9, 5]
    assert frequent_vocab(counts, 2).tolist() == [2, 5] and frequent_vocab(counts, 3).tolist() == [2, 5, 7]


# -- batching ------------------------------------------------------------------------------


def test_length_grouped_batches_have_little_padding_and_reach_every_text():
    gen = torch.Generator().manual_seed(0)
    lengths = np.asarray(torch.randint(8, 64, (500,), generator=gen))
    order = length_order(lengths, gen)
    assert list(lengths[order]) == sorted(lengths)
    drawn = set()
    for _ in range(400):
        idx = length_grouped_batch(order, 16, gen)
        assert len(idx) == 16 and len(set(idx)) == 16
        assert lengths[idx].max() - lengths[idx].min() <= 8  # ~56 lengths over 500 texts
        drawn.update(idx)
    assert len(drawn) > 450
    assert len(length_grouped_batch(order[:5], 16, gen)) == 16  # fewer texts than a batch


def test_train_mlm_learns_on_repeated_text(mlm_model_dir):
    from fedml_fes.models import build_masked_lm, load_tokenizer

    tok = load_tokenizer(mlm_model_dir)
    model = build_masked_lm(mlm_model_dir, 0)
    texts = ["the cat sat on the mat and the dog sat on the rug."] * 8
    acc = lambda: masked_token_accuracy(
        model, tok, texts, batch_size=8, max_len=32, prob=0.3, seed=1, device=torch.device("cpu")
    )
    before = acc()
    ids = tokenize_texts(tok, texts, 32)
    metrics = train_mlm(
        model,
        tok,
        texts,
        steps=40,
        batch_size=8,
        lr=3e-3,
        weight_decay=0.0,
        max_len=32,
        prob=0.3,
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        token_ids=ids,
        lr_at=lambda i: 3e-3 * (1 - i / 40),
    )
    assert metrics["lr_first"] == pytest.approx(3e-3) and metrics["lr_last"] == pytest.approx(3e-3 / 40)
    assert acc() > before + 0.3


# -- what the build trains on --------------------------------------------------------------


def test_build_trains_on_all_train_split_text_and_never_the_test_split(tmp_path, mlm_model_dir, monkeypatch):
    from fedml_fes.data.federated import build_federated_data, load_splits
    from fedml_fes.runtime import fedbert

    raw = _raw(tmp_path, mlm_model_dir)
    raw["train_args"].update(comm_round=8, client_num_per_round=8)
    raw["mlm_args"]["local_steps"] = 1
    cfg = config_from_dict(raw)
    trained: set[str] = set()
    real = fedbert.train_mlm

    def spy(model, tokenizer, texts, **kw):
        trained.update(texts)
        return real(model, tokenizer, texts, **kw)

    monkeypatch.setattr(fedbert, "train_mlm", spy)
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    summary = run_in_process(cfg, make_run_dir(cfg), progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed"
    train, test = load_splits(cfg)
    train_sentences = set(sentence_chunks(train.texts))
    test_only = set(sentence_chunks(test.texts)) - train_sentences
    data, _ = build_federated_data(cfg)
    assert data.gold_clients() and test_only
    assert trained == train_sentences  # every client's text, the gold clients' labeled text included
    assert not trained & test_only


# -- progress and cache --------------------------------------------------------------------


def test_progress_lines_come_before_loading_and_training(tmp_path, mlm_model_dir, monkeypatch):
    import fedml_fes_plugins.runtimes.inprocess as inprocess
    from fedml_fes.runtime import fedbert

    events: list[str] = []
    real_build, real_train = inprocess.build_job, fedbert.train_mlm

    def build(*a, **kw):
        events.append("<build_job>")
        return real_build(*a, **kw)

    def train(*a, **kw):
        events.append("<train>")
        return real_train(*a, **kw)

    monkeypatch.setattr(inprocess, "build_job", build)
    monkeypatch.setattr(fedbert, "train_mlm", train)
    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir))
    inprocess.run_in_process(cfg, make_run_dir(cfg), progress=False, echo=events.append)
    assert events[0] == "fedbert_mlm: loading data and model" and events[1] == "<build_job>"
    start = events.index("fedbert_mlm: training, 3 rounds x 4 steps")
    assert events.index("fedbert_mlm: initial evaluation") < start < events.index("<train>")
    assert sum(e.startswith("round") for e in events) == 3


def test_progress_bar_counts_steps_from_the_start(tmp_path, mlm_model_dir, capsys):
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir))
    lines: list[str] = []
    run_in_process(cfg, make_run_dir(cfg), progress=True, echo=lines.append)
    err = capsys.readouterr().err
    assert "fedbert_mlm: loading data and model" in err.split("fedbert_mlm: training")[0]
    assert "12/12" in err and "step" in err
    assert not any(line.startswith("fedbert_mlm:") for line in lines)  # the bar says it, not lines


def test_second_build_is_reused_without_loading_the_model(tmp_path, mlm_model_dir, monkeypatch):
    import fedml_fes_plugins.runtimes.inprocess as inprocess

    cfg = config_from_dict(_raw(tmp_path, mlm_model_dir))
    first = inprocess.run_in_process(cfg, make_run_dir(cfg), progress=False, echo=lambda _l: None)
    assert first["status"] == "completed"
    monkeypatch.setattr(inprocess, "build_job", lambda *a, **kw: pytest.fail("a cached build loads nothing"))
    lines: list[str] = []
    second = inprocess.run_in_process(cfg, make_run_dir(cfg), progress=False, echo=lines.append)
    assert second["status"] == "cached" and second["path"] == first["mlm_path"]
    assert lines[0].startswith("reusing cached fedbert_mlm build")
    # a different schedule is a different build
    other = config_from_dict(_raw(tmp_path, mlm_model_dir, lr_schedule="cosine"))
    assert mlm_cache_key(other) != mlm_cache_key(cfg)


def test_the_mlm_build_runs_from_the_cli_as_its_error_message_says(tmp_path, mlm_model_dir, capsys):
    """`fedml-fes run --cf <fedbert_mlm config>` (what resolve_mlm_path tells a user to run):
    the dry run and the run itself, no prompt involved; the build lands in the cache."""
    from fedml_fes.config import load_config
    from fedml_fes.pretrain.cache import load_cached_info
    from fedml_fes_plugins.cli.main import main

    cf = write_config(tmp_path / "mlm.yaml", _raw(tmp_path, mlm_model_dir))
    assert main(["run", "--cf", str(cf), "--dry-run"]) == 0
    assert "method: fedbert_mlm" in capsys.readouterr().out
    assert main(["run", "--cf", str(cf), "--no-progress"]) == 0
    assert load_cached_info(load_config(str(cf))) is not None


def test_missing_job_data_stops_before_the_mlm_build(tmp_path, mlm_model_dir, monkeypatch):
    """A build takes minutes and is cached, but a run whose own dataset is missing should say so
    first: the job's data is read before the build starts."""
    from fedml_fes_plugins.runtimes import inprocess

    recipe = write_config(tmp_path / "mlm.yaml", _raw(tmp_path, mlm_model_dir))
    raw = small_config(
        tmp_path,
        mlm_model_dir,
        train_args={"method": "prompt_only"},
        data_args={"dataset": "agnews", "data_dir": str(tmp_path / "no-agnews")},
        model_args={"mlm_from": str(recipe)},
    )
    built = []
    monkeypatch.setattr(inprocess, "run_in_process", lambda *a, **k: built.append(a))
    with pytest.raises(FesError, match="AG News folder not found"):
        inprocess.ensure_mlm_build(config_from_dict(raw), echo=lambda _l: None)
    assert not built
    raw["data_args"] = {**raw["data_args"], "dataset": "bbc_news"}  # data there: the build runs
    inprocess.ensure_mlm_build(config_from_dict(raw), echo=lambda _l: None)
    assert len(built) == 1

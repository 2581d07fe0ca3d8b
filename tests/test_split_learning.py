"""FedBERT split learning: the split step is the unsplit model's step, traffic is
the payloads' length, the two schedules do what they say, and whole runs work in-process and
under mpirun with the same results."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.splitfed.parts import body_name_in_model, merged_params, params_of, split_model
from fedml_fes.splitfed.protocol import LocalLink, PartyRng, Settings, SplitClient, SplitServer, split_step
from fedml_fes.splitfed.tasks import Batch, Shard
from fedml_fes.splitfed.wire import pack, unpack

from .conftest import small_config, write_config

CPU = torch.device("cpu")


def _tiny(task: str, dropout: float = 0.0):
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        num_labels=3,
    )
    return (BertForMaskedLM if task == "mlm" else BertForSequenceClassification)(cfg)


def _settings(schedule: str = "parallel", lr: float = 0.0, **kw) -> Settings:
    return Settings(schedule=schedule, learning_rate=lr, weight_decay=0.0, wire_dtype="float32", seed=0, **kw)


class CountingLink(LocalLink):
    """A LocalLink that also keeps every payload it carried, both ways."""

    def __init__(self, server):
        super().__init__(server)
        self.sent: list[tuple[str, bytes, bytes]] = []

    def exchange(self, kind, client_id, payload):
        reply = super().exchange(kind, client_id, payload)
        self.sent.append((kind, payload, reply))
        return reply


# ---- the split step ----


@pytest.mark.parametrize("task,client_layers", [("mlm", 0), ("mlm", 1), ("classification", 0), ("classification", 1)])
def test_split_step_gradients_equal_the_unsplit_model(task, client_layers):
    model = _tiny(task)
    ids = torch.randint(5, 100, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    if task == "mlm":
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, 2] = targets[1, 3] = targets[2, 1] = targets[0, 5] = True
        labels = ids[targets].clone()
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids, attention_mask=mask).logits[targets], labels)
    else:
        targets, labels = None, torch.tensor([0, 2, 1])
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids, attention_mask=mask).logits, labels)
    client, body = split_model(model, task, client_layers)
    loss.backward()
    expected = {n: p.grad for n, p in model.named_parameters()}

    server = SplitServer(client, body, _settings())
    server.begin_round(0, [0])
    got: dict[str, torch.Tensor] = {}
    for n, p in server.sessions[0].body.named_parameters():  # the server zeroes its grads after its step
        p.register_hook(lambda g, n=n: got.__setitem__(body_name_in_model(model, n, client_layers), g.clone()))
    part = copy.deepcopy(client)
    split_loss = split_step(
        part,
        torch.optim.SGD(part.parameters(), lr=0.0),
        LocalLink(server),
        0,
        Batch(ids, mask, targets, labels),
        PartyRng(0),
        torch.float32,
        CPU,
    )
    got.update({n.removeprefix("model."): p.grad for n, p in part.named_parameters()})
    assert split_loss == pytest.approx(float(loss), abs=1e-6)
    assert set(got) == {n for n, g in expected.items() if g is not None}
    for n, g in got.items():
        torch.testing.assert_close(g, expected[n], atol=1e-6, rtol=1e-5, msg=n)
    # the parts hold exactly the model's parameters, under the model's names
    assert set(merged_params(model, client, body, client_layers)) == set(dict(model.named_parameters()))


def test_wire_round_trip_and_measured_bytes_are_payload_lengths():
    tensors = {
        "a": torch.randn(2, 3),
        "h": torch.randn(4).half(),
        "m": torch.tensor([[1, 0]], dtype=torch.uint8),
        "i": torch.arange(5),
        "e": torch.zeros(0, 3),
    }
    back, meta = unpack(pack(tensors, {"examples": 7}))
    assert meta == {"examples": 7}
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t)

    model = _tiny("classification")
    client, body = split_model(model, "classification", 0)
    server = SplitServer(client, body, _settings(lr=1e-3))
    shard = Shard(0, [[2, 10 + i, 11, 3] for i in range(6)], [0, 1, 2, 0, 1, 2])
    runner = SplitClient(
        copy.deepcopy(client),
        lambda c: shard,
        SimpleNamespace(pad_token_id=0),
        _settings(lr=1e-3, local_steps=3, batch_size=2),
    )
    link = CountingLink(server)
    server.begin_round(0, [0])
    runner.play(0, 0, link)
    server.end_round()
    for kind in ("model_pull", "activations", "gradients", "model_push"):
        sent = [x for x in link.sent if x[0] == kind]
        assert server.traffic.bytes[f"{kind}_up"] == sum(len(p) for _, p, _ in sent)
        assert server.traffic.bytes[f"{kind}_down"] == sum(len(r) for _, _, r in sent)
    assert server.traffic.messages["activations_up"] == 3
    # a step's activations: (B, W, H) float32 plus two (B, W) uint8 masks, plus the header
    _, up, down = next(x for x in link.sent if x[0] == "activations")
    header = int.from_bytes(up[:4], "little")
    assert len(up) == 4 + header + 2 * 4 * 16 * 4 + 2 * 2 * 4
    header = int.from_bytes(down[:4], "little")
    assert len(down) == 4 + header + 2 * 16 * 4  # classification: only the first token's row comes down
    assert server.traffic.bytes["model_pull_down"] == len(pack(params_of(client)))


# ---- schedules ----


def _round(schedule: str, clients: list[int], shards: dict[int, Shard]):
    model = _tiny("classification")
    client, body = split_model(model, "classification", 0)
    server = SplitServer(client, body, _settings(schedule, lr=1e-2))
    runner = SplitClient(
        copy.deepcopy(client),
        shards.__getitem__,
        SimpleNamespace(pad_token_id=0),
        _settings(schedule, lr=1e-2, local_steps=2, batch_size=2),
    )
    link = CountingLink(server)
    server.begin_round(0, clients)
    return server, runner, link, params_of(copy.deepcopy(body)), params_of(copy.deepcopy(client))


def _shards() -> dict[int, Shard]:
    return {
        0: Shard(0, [[2, 10, 11, 3], [2, 12, 3]], [0, 1]),
        1: Shard(1, [[2, 20, 21, 22, 3], [2, 23, 3], [2, 24, 25, 3], [2, 26, 3]], [2, 2, 1, 0]),
    }


def test_parallel_clients_start_alike_and_the_body_copies_are_averaged():
    server, runner, link, body0, part0 = _round("parallel", [0, 1], _shards())
    bodies = {c: s.body for c, s in server.sessions.items()}
    assert bodies[0] is not bodies[1] and bodies[0] is not server.body
    for c in (0, 1):
        runner.play(0, c, link)
    pulls = [r for k, _, r in link.sent if k == "model_pull"]
    assert pulls[0] == pulls[1] == pack(part0)  # both start from the round's global part
    pushes = [unpack(p)[0] for k, p, _ in link.sent if k == "model_push"]
    copies = [params_of(bodies[c]) for c in (0, 1)]
    server.end_round()
    w = [2 / 6, 4 / 6]  # by examples
    for name, t in params_of(server.body).items():
        torch.testing.assert_close(t, w[0] * copies[0][name] + w[1] * copies[1][name])
        assert not torch.equal(t, body0[name]) or "LayerNorm" in name or name.endswith("bias")
    for name, t in params_of(server.client_part).items():
        torch.testing.assert_close(t, w[0] * pushes[0][name] + w[1] * pushes[1][name])


def test_sequential_clients_hand_the_part_on_and_share_one_body():
    server, runner, link, body0, part0 = _round("sequential", [1, 0], _shards())
    assert server.sessions[0].body is server.sessions[1].body is server.body
    runner.play(0, 1, link)
    after_first = params_of(copy.deepcopy(server.body))
    runner.play(0, 0, link)
    kinds = [k for k, _, _ in link.sent]
    pulls = [r for k, _, r in link.sent if k == "model_pull"]
    pushes = [p for k, p, _ in link.sent if k == "model_push"]
    assert pulls[0] == pack(part0)
    assert unpack(pulls[1])[0].keys() == unpack(pushes[0])[0].keys()
    for name, t in unpack(pulls[1])[0].items():  # the second client starts where the first stopped
        assert torch.equal(t, unpack(pushes[0])[0][name])
    assert kinds.index("model_push") < kinds.index("model_pull", 1)
    server.end_round()  # nothing to average: the last push is the part, the body trained in turn
    for name, t in unpack(pushes[1])[0].items():
        assert torch.equal(params_of(server.client_part)[name], t)
    assert any(not torch.equal(after_first[n], t) for n, t in params_of(server.body).items())


# ---- config ----


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("task", "ner", "split_args.task must be one of mlm, classification"),
        ("schedule", "ring", "split_args.schedule must be one of parallel, sequential"),
        ("local_steps", 0, "split_args.local_steps must be >= 1"),
        ("wire_dtype", "int8", "split_args.wire_dtype must be float32 or float16"),
        ("labels", "some", "split_args.labels must be gold or all"),
        ("client_layers", -1, "split_args.client_layers must be >= 0"),
        ("cut", 2, "unknown config key 'cut'"),
    ],
)
def test_bad_split_config_is_one_line(key, value, words):
    with pytest.raises(FesError) as e:
        config_from_dict({"split_args": {key: value}})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_mpirun_needs_a_server_and_a_client():
    from fedml_fes_plugins.runtimes.launcher import MpirunJob
    from fedml_fes_plugins.runtimes.split_mpi import MODULE

    with pytest.raises(FesError, match="-np must be at least 2"):
        MpirunJob(config_from_dict({}), "x.yaml", 1).command(Path("."), module=MODULE)


def test_cut_above_the_model_is_one_line():
    with pytest.raises(FesError, match="client_layers must be below the model's 2 encoder layers"):
        split_model(_tiny("mlm"), "mlm", 2)


# ---- whole runs ----


def _split_config(tmp_path: Path, model_dir: str, task: str, schedule: str, **split) -> dict:
    return small_config(
        tmp_path,
        model_dir,
        split_args={"task": task, "schedule": schedule, "local_steps": 2, **split},
        train_args={"comm_round": 2, "client_num_per_round": 3, "learning_rate": 0.001, "eval_batch_size": 32},
        mlm_args={"heldout_texts": 40},
    )


def test_cli_split_runs_in_process_and_saves_the_merged_model(tmp_path, tiny_model_dir, capsys):
    from fedml_fes.data.federated import build_federated_data
    from fedml_fes.models import load_tokenizer
    from fedml_fes.pretrain.mlm import masked_token_accuracy, sentence_chunks
    from fedml_fes_plugins.cli.main import main

    cf = write_config(
        tmp_path / "split.yaml", _split_config(tmp_path, tiny_model_dir, "mlm", "parallel", save_model=True)
    )
    assert main(["split", "--cf", str(cf), "--run-dir", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2
    assert summary["traffic_messages"]["activations_up"] == 2 * 3 * 2  # rounds x clients x steps
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3 and "bytes_activations_up" in rows[0] and "fedavg_bytes_round" in rows[0]
    # the merged model scores what the split model scored (same fixed masks)
    model = BertForMaskedLM.from_pretrained(tmp_path / "run" / "model")
    cfg = config_from_dict(_split_config(tmp_path, tiny_model_dir, "mlm", "parallel"))
    data, _ = build_federated_data(cfg)
    acc = masked_token_accuracy(
        model,
        load_tokenizer(tiny_model_dir),
        sentence_chunks(data.test.texts)[:40],
        batch_size=32,
        max_len=32,
        prob=0.15,
        seed=1234,
        device=CPU,
    )
    assert acc == pytest.approx(summary["final"], abs=1e-9)
    # a bad value through the CLI: one line, exit 1
    capsys.readouterr()
    assert main(["split", "--cf", str(cf), "--set", "split_args.schedule=ring"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedml-fes: error: split_args.schedule must be one of parallel, sequential, got 'ring'"]
    # the same config through `run` (FedAvg of train_args.method) would not split: one line
    assert main(["run", "--cf", str(cf)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "it is a split-learning config, run it with `fedml-fes split" in err[0]


@pytest.mark.parametrize(
    "task,schedule", [("mlm", "sequential"), ("classification", "parallel"), ("classification", "sequential")]
)
def test_split_runs_in_process(tmp_path, tiny_model_dir, task, schedule):
    from fedml_fes.splitfed.runtime import make_split_run_dir, run_in_process

    labels = {"labels": "all"} if (task, schedule) == ("classification", "sequential") else {}
    cfg = config_from_dict(_split_config(tmp_path, tiny_model_dir, task, schedule, **labels))
    summary = run_in_process(cfg, make_split_run_dir(cfg, str(tmp_path / "run")), echo=lambda _: None)
    assert summary["status"] == "completed" and summary["task"] == task and summary["schedule"] == schedule
    assert 0 <= summary["final"] <= 1 and summary["bytes_per_step"] > 0
    t = summary["traffic_bytes"]
    assert t["model_push_up"] > 0 and t["activations_up"] > t["gradients_up"]  # rows down are few


def _mpirun_matches_in_process(tmp_path: Path, tiny_model_dir: str, task: str, schedule: str) -> None:
    from fedml_fes.splitfed.runtime import make_split_run_dir, run_in_process
    from fedml_fes_plugins.runtimes.launcher import MpirunJob
    from fedml_fes_plugins.runtimes.split_mpi import run_split_mpirun

    raw = _split_config(tmp_path, tiny_model_dir, task, schedule)
    cf = write_config(tmp_path / "split.yaml", raw)
    cfg = config_from_dict(raw)
    local = run_in_process(cfg, make_split_run_dir(cfg, str(tmp_path / "local")), echo=lambda _: None)
    lines: list[str] = []
    job = MpirunJob(cfg, str(cf), 3, echo=lines.append, timeout_s=240)
    remote = run_split_mpirun(job, make_split_run_dir(cfg, str(tmp_path / "mpi")))
    assert remote["status"] == "completed" and any(line.startswith("round   1") for line in lines)
    assert remote["traffic_bytes"] == local["traffic_bytes"]
    assert remote["traffic_messages"] == local["traffic_messages"]
    rows = [(tmp_path / d / "metrics.csv").read_text().splitlines() for d in ("local", "mpi")]
    import csv

    local_rows, mpi_rows = (list(csv.DictReader(r)) for r in rows)
    metric = local["primary_metric"]
    for a, b in zip(local_rows, mpi_rows, strict=True):
        for key in ("train_loss", metric, "eval_loss"):
            assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-5), key


@pytest.mark.slow
def test_mpirun_parallel_mlm_matches_in_process(tmp_path, tiny_model_dir):
    _mpirun_matches_in_process(tmp_path, tiny_model_dir, "mlm", "parallel")


@pytest.mark.slow
def test_mpirun_sequential_classification_matches_in_process(tmp_path, tiny_model_dir):
    _mpirun_matches_in_process(tmp_path, tiny_model_dir, "classification", "sequential")

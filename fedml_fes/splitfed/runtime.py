"""Split-learning runs: build the parts, pick each round's clients, record rows; in-process driver.

`SplitRun` is the server side of a run (rank 0 under mpirun, the whole process in-process):
the data's test split, the body and the global client part, the round's client draw,
evaluation, metrics.csv / summary.json. `ClientSide` is what a process that plays clients
holds. `run_in_process` drives both with a `LocalLink`; `fedml_fes_plugins.runtimes.split_mpi`
drives the same two objects over MPI, so the rows match for the same config and seed.
"""

from __future__ import annotations

import copy
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from ..config import FesConfig
from ..data.federated import FederatedData, LabelOracle, build_federated_data
from ..errors import FesError, one_line
from ..models import build_classifier, build_masked_lm, load_tokenizer, quiet_transformers
from ..pretrain.mlm import sentence_chunks, set_dropout
from ..report.metrics import RunRecorder, format_row
from .parts import ClientPart, load_merged, params_of, split_model
from .protocol import LocalLink, Settings, SplitClient, SplitServer
from .tasks import Shard, eval_texts, evaluate, make_shard
from .wire import pack

_ROUND_STREAM = 0x5B17


def primary_metric(cfg: FesConfig) -> str:
    return "masked_token_acc" if cfg.split_args.task == "mlm" else "accuracy"


def default_run_name(cfg: FesConfig) -> str:
    from ..runtime.rundir import dataset_label

    s = cfg.split_args
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"split_{s.task}_{s.schedule}-{dataset_label(cfg)}-s{cfg.common.random_seed}-{stamp}"


def make_split_run_dir(cfg: FesConfig, run_dir: str | None = None, lock: bool = False) -> Path:
    from ..runtime.rundir import make_run_dir

    name = run_dir or str(Path(cfg.common.output_dir) / (cfg.common.run_name or default_run_name(cfg)))
    return make_run_dir(cfg, name, lock=lock)


def settings_of(cfg: FesConfig, device: torch.device) -> Settings:
    s, t, m = cfg.split_args, cfg.train, cfg.mlm
    return Settings(
        schedule=s.schedule,
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        wire_dtype=s.wire_dtype,
        seed=cfg.common.random_seed,
        local_steps=s.local_steps,
        batch_size=t.batch_size,
        mask_prob=m.train_mask_probability or m.mask_probability,
        device=device,
    )


def build_model(cfg: FesConfig, num_classes: int) -> torch.nn.Module:
    """The whole model, the same in every process (weights and new heads from the seed)."""
    if cfg.split_args.task == "mlm":
        model = build_masked_lm(cfg.model.model, cfg.common.random_seed)
        if cfg.mlm.dropout >= 0:
            set_dropout(model, cfg.mlm.dropout)
        return model
    return build_classifier(cfg.model.model, num_classes, cfg.common.random_seed)


class ClientSide:
    """A process that plays clients: the data, a client-part template, the tokenizer."""

    def __init__(
        self,
        cfg: FesConfig,
        data: FederatedData,
        oracle: LabelOracle | None,
        tokenizer,
        part: ClientPart,
        device: torch.device,
    ):
        self.cfg, self.data, self.oracle, self.tok = cfg, data, oracle, tokenizer
        self._shards: dict[int, Shard] = {}
        self.client = SplitClient(part, self.shard, tokenizer, settings_of(cfg, device))

    def shard(self, client_id: int) -> Shard:
        """The client's training examples, tokenized on first use."""
        if client_id not in self._shards:
            s = self.cfg.split_args
            self._shards[client_id] = make_shard(
                s.task, self.data.clients[client_id], self.oracle, self.tok, self.cfg.model.max_seq_length, s.labels
            )
        return self._shards[client_id]


def eligible_clients(cfg: FesConfig, data: FederatedData) -> list[int]:
    """Clients with something to train on: text (MLM) or labeled examples (classification)."""
    s = cfg.split_args
    if s.task == "mlm":
        return [c.client_id for c in data.clients if sentence_chunks(c.all_texts())]
    if s.labels == "all":
        return [c.client_id for c in data.clients if c.num_gold + len(c.unlabeled) > 0]
    return [c.client_id for c in data.clients if c.num_gold > 0]


def round_clients(cfg: FesConfig, round_idx: int, eligible: list[int]) -> list[int]:
    """The round's clients in their (sequential) order, drawn from the seed and the round."""
    k = min(cfg.train.client_num_per_round, len(eligible))
    rng = np.random.default_rng([cfg.common.random_seed, round_idx, _ROUND_STREAM])
    return [int(c) for c in rng.choice(np.asarray(eligible), size=k, replace=False)]


def _device(cfg: FesConfig) -> torch.device:
    """As runtime.job.select_device (not imported: it pulls in every method's modules)."""
    if cfg.device_args.using_gpu and torch.cuda.is_available():
        return torch.device(f"cuda:{cfg.device_args.gpu_id}")
    return torch.device("cpu")


def prepare(cfg: FesConfig, role: str) -> tuple[FederatedData, LabelOracle | None, Any, torch.nn.Module, torch.device]:
    """Data, oracle (dropped for role 'client' unless labels: all needs it), tokenizer, model, device."""
    if cfg.common.torch_threads > 0:  # part of bitwise equality across runtimes (runtime.job.configure_torch)
        torch.set_num_threads(cfg.common.torch_threads)
    data, oracle = build_federated_data(cfg)
    tokenizer = load_tokenizer(cfg.model.model)
    if cfg.split_args.task == "mlm" and tokenizer.mask_token_id is None:
        raise FesError("split_args.task mlm needs a masked-LM tokenizer (it has no mask token)")
    device = _device(cfg)
    model = build_model(cfg, len(data.classes))
    keep_oracle = role != "client" or cfg.split_args.labels == "all"  # labels: all is the fully labeled setting
    return data, oracle if keep_oracle else None, tokenizer, model, device


class SplitRun:
    """The server side of a split-learning run: rounds, evaluation, records."""

    def __init__(
        self,
        cfg: FesConfig,
        run_dir: Path,
        data: FederatedData,
        tokenizer,
        model: torch.nn.Module,
        device: torch.device,
    ):
        self.cfg, self.run_dir, self.data, self.tok, self.model, self.device = (
            cfg,
            Path(run_dir),
            data,
            tokenizer,
            model,
            device,
        )
        s = cfg.split_args
        client, body = split_model(model, s.task, s.client_layers)
        self.server = SplitServer(client, body, settings_of(cfg, device))
        self.eligible = eligible_clients(cfg, data)
        if not self.eligible:
            raise FesError(
                f"split learning: no client has {'text' if s.task == 'mlm' else 'labeled examples'} "
                f"to train on" + ("" if s.task == "mlm" else " (split_args.labels all uses every one)")
            )
        self.metric = primary_metric(cfg)
        self.recorder = RunRecorder(self.run_dir, self.metric)
        test = data.test
        self.eval_texts = eval_texts(s.task, test.texts, cfg.mlm.heldout_texts)
        self.eval_labels = None if s.task == "mlm" else [int(y) for y in test.labels]
        self.eval_texts_b = None if s.task == "mlm" else (list(test.texts_b) if test.texts_b is not None else None)
        # what FedAvg of the whole model moves per client per round, in the same wire format
        self.full_model_bytes = len(pack(params_of(model)))
        self.client_part_params = sum(p.numel() for p in client.parameters())
        self.body_params = sum(p.numel() for p in body.parameters())
        self._round_start = 0.0
        self._traffic_before: dict[str, int] = {}

    def clients_of(self, round_idx: int) -> list[int]:
        return round_clients(self.cfg, round_idx, self.eligible)

    def begin_round(self, round_idx: int) -> list[int]:
        clients = self.clients_of(round_idx)
        self._round_start = time.time()
        self._traffic_before = dict(self.server.traffic.bytes)
        self.server.begin_round(round_idx, clients)
        return clients

    def evaluate(self) -> dict[str, float]:
        t = self.cfg.train
        return evaluate(
            self.server.client_part,
            self.server.body,
            self.tok,
            self.eval_texts,
            self.eval_labels,
            batch_size=t.eval_batch_size,
            max_len=self.cfg.model.max_seq_length,
            mask_prob=self.cfg.mlm.mask_probability,
            device=self.device,
            texts_b=self.eval_texts_b,
        )

    def end_round(self, round_idx: int, reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Average (parallel), evaluate when due, append the round's metrics row."""
        self.server.end_round()
        reports = sorted(reports, key=lambda r: r["client_id"])
        t = self.cfg.train
        row: dict[str, Any] = {
            "round": round_idx,
            "train_loss": float(np.mean([r["train_loss"] for r in reports])),
            "clients": len(reports),
            "steps": int(sum(r["steps"] for r in reports)),
        }
        if (round_idx + 1) % t.frequency_of_the_test == 0 or round_idx == t.comm_round - 1:
            scores = self.evaluate()
            row[self.metric], row["eval_loss"] = scores["accuracy"], scores["eval_loss"]
        else:
            row[self.metric], row["eval_loss"] = float("nan"), float("nan")
        now = dict(self.server.traffic.bytes)
        delta = {k: v - self._traffic_before.get(k, 0) for k, v in now.items()}
        step_bytes = sum(v for k, v in delta.items() if k.split("_")[0] in ("activations", "gradients"))
        row.update({f"bytes_{k}": v for k, v in sorted(delta.items())})
        row["bytes_per_step"] = step_bytes / max(1, row["steps"])
        row["bytes_round"] = sum(delta.values())
        row["fedavg_bytes_round"] = 2 * self.full_model_bytes * len(reports)
        row["round_wall_s"] = time.time() - self._round_start
        self.recorder.append(row)
        return row

    def finish(self, status: str = "completed", error: str | None = None) -> dict[str, Any]:
        s = self.cfg.split_args
        extra: dict[str, Any] = {
            "task": s.task,
            "schedule": s.schedule,
            "client_layers": s.client_layers,
            "wire_dtype": s.wire_dtype,
            "run_dir": str(self.run_dir),
            "client_part_params": self.client_part_params,
            "body_params": self.body_params,
            "full_model_bytes": self.full_model_bytes,
            "traffic_bytes": dict(sorted(self.server.traffic.bytes.items())),
            "traffic_messages": dict(sorted(self.server.traffic.messages.items())),
        }
        steps = sum(r["steps"] for r in self.recorder.rows)
        if steps:
            extra["bytes_per_step"] = self.server.traffic.total("activations", "gradients") / steps
        if status == "completed" and s.save_model:
            out = self.run_dir / "model"
            with quiet_transformers():  # no progress bar for one small file
                load_merged(
                    copy.deepcopy(self.model), self.server.client_part, self.server.body, s.client_layers
                ).save_pretrained(out)
                self.tok.save_pretrained(out)
            extra["model_path"] = str(out)
        return self.recorder.finish(status, error, **extra)


def run_in_process(cfg: FesConfig, run_dir: Path, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Every round: the server opens it, each client plays through a LocalLink, the server
    closes it (averaging under `parallel`) and evaluates. Returns summary.json's content."""
    data, oracle, tokenizer, model, device = prepare(cfg, role="both")
    run = SplitRun(cfg, run_dir, data, tokenizer, model, device)
    client_part = copy.deepcopy(run.server.client_part)  # the clients' own copy, loaded from pulls
    side = ClientSide(cfg, data, oracle, tokenizer, client_part, device)
    link = LocalLink(run.server)
    try:
        for r in range(cfg.train.comm_round):
            clients = run.begin_round(r)
            reports = [side.client.play(r, c, link) for c in clients]
            echo(
                format_row(run.end_round(r, reports), run.metric)
                + f"  bytes/step={run.recorder.rows[-1]['bytes_per_step']:.0f}"
            )
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: the finished rounds stay in metrics.csv
        run.finish("interrupted", str(e) or "interrupted")
        raise
    except Exception as e:
        error = f"split run failed in round {len(run.recorder.rows)}: {one_line(e)}"
        run.finish("failed", error)
        if isinstance(e, FesError):
            raise
        raise FesError(f"{error} (details in {run_dir})") from e
    return run.finish()

"""FedBERT's client task: masked-LM pre-training on every client's own text, no labels.

The `fedbert_mlm` method of `runtime.methods.PRESETS`; the MLM steps, the learning-rate
schedule and the cache of built models are `fedml_fes.pretrain`'s.
"""

from __future__ import annotations

import torch

from ..data.federated import build_federated_data
from ..errors import FesError
from ..models import build_masked_lm, skeleton
from ..pretrain.cache import load_cached_info, save_mlm
from ..pretrain.mlm import (
    build_steps,
    check_mlm_settings,
    frequent_vocab,
    init_vocab_bias,
    log_prior,
    lr_factor,
    masked_token_accuracy,
    sentence_chunks,
    set_dropout,
    token_histogram,
    tokenize_texts,
    train_mlm,
)
from .tasks import task_seed


class FedBertMlm:
    """FedBERT-style MLM pre-training on every client's own text (no labels used).

    The learning rate follows one schedule over the whole build (mlm_args.lr_schedule): a
    client task finds its place in it from its round, which it reads off the task's seed
    (`task_seed(run seed, round, client)`, the seed every transport gives the task's
    generator), so no transport carries anything new. `set_progress` lets a runtime show
    every optimizer step; a client tokenizes its text once per process.
    """

    name = "fedbert_mlm"
    primary_metric = "masked_token_acc"
    uses_pseudo = False
    train_kind = "mlm"

    def __init__(self):
        self._tokens: dict[int, tuple[list[str], list[list[int]]]] = {}
        self._on_step = None
        self._vocab: torch.Tensor | None = None  # train_vocab's token ids

    def set_progress(self, on_step) -> None:
        """Call `on_step()` after every local optimizer step (None: stop)."""
        self._on_step = on_step

    def steps_per_task(self, cfg) -> int:
        return cfg.mlm.local_steps

    def build_model(self, cfg, classes, tokenizer, weights: bool = True):
        check_mlm_settings(cfg)
        if not weights:  # every weight trains and travels
            return skeleton(cfg.model.model, masked_lm=True)
        model = build_masked_lm(cfg.model.model, cfg.common.random_seed)
        if cfg.mlm.dropout >= 0:
            set_dropout(model, cfg.mlm.dropout)
        self._vocab = None
        if cfg.mlm.unigram_bias or cfg.mlm.train_vocab:
            # the sum of the clients' token histograms; every process derives the same one
            # from the same partition, as it does the initial model
            data, _ = build_federated_data(cfg)
            max_len = cfg.model.max_seq_length
            counts = token_histogram(
                [ids for c in data.clients for ids in self._client_text(c, tokenizer, max_len)[1]],
                model.get_output_embeddings().weight.shape[0],
            )
            if cfg.mlm.unigram_bias:
                init_vocab_bias(model, log_prior(counts))
            if cfg.mlm.train_vocab:
                self._vocab = frequent_vocab(counts, cfg.mlm.train_vocab)
        return model

    def eligible_clients(self, data):
        return [c.client_id for c in data.clients if sentence_chunks(c.all_texts())]

    def _client_text(self, client, tokenizer, max_len):
        if client.client_id not in self._tokens:
            texts = sentence_chunks(client.all_texts())
            self._tokens[client.client_id] = (texts, tokenize_texts(tokenizer, texts, max_len))
        return self._tokens[client.client_id]

    @staticmethod
    def task_round(cfg, client_id: int, generator: torch.Generator) -> int:
        """The round of the running task: the one whose task seed seeded `generator`."""
        seed = generator.initial_seed()
        for r in range(cfg.train.comm_round):
            if task_seed(cfg.common.random_seed, r, client_id) == seed:
                return r
        if cfg.mlm.lr_schedule == "constant" and not cfg.mlm.warmup_fraction:
            return 0  # no schedule: the round does not matter
        raise FesError(
            f"fedbert_mlm: cannot place a task of client {client_id} in the lr schedule "
            f"(its generator was not seeded with the task seed of any round)"
        )

    def local_train(self, model, tokenizer, client, cfg, generator, device, pseudo):
        texts, token_ids = self._client_text(client, tokenizer, cfg.model.max_seq_length)
        m = cfg.mlm
        first_step = self.task_round(cfg, client.client_id, generator) * m.local_steps
        total, warmup = build_steps(cfg)
        peak = cfg.train.learning_rate
        metrics = train_mlm(
            model,
            tokenizer,
            texts,
            steps=m.local_steps,
            batch_size=cfg.train.batch_size,
            lr=peak,
            weight_decay=cfg.train.weight_decay,
            max_len=cfg.model.max_seq_length,
            prob=m.train_mask_probability or m.mask_probability,
            generator=generator,
            device=device,
            token_ids=token_ids,
            lr_at=lambda i: peak * lr_factor(first_step + i, total, warmup, m.lr_schedule),
            on_step=self._on_step,
            vocab=self._vocab,
        )
        return float(len(texts)), metrics

    def label(self, model, client, cfg, device, previous, store_dir, options):
        raise FesError("fedbert_mlm does not pseudo-label")

    def evaluate(self, model, tokenizer, test, cfg, device):
        texts = sentence_chunks(test.texts)[: cfg.mlm.heldout_texts]
        acc = masked_token_accuracy(
            model,
            tokenizer,
            texts,
            batch_size=cfg.train.eval_batch_size,
            max_len=cfg.model.max_seq_length,
            prob=cfg.mlm.mask_probability,
            seed=1234,
            device=device,
        )
        return {"masked_token_acc": acc}

    def cached_result(self, cfg):
        return load_cached_info(cfg)

    def save_result(self, model, tokenizer, cfg, summary):
        info = {
            "masked_token_acc": summary.get("final"),
            "rounds": summary.get("rounds_completed"),
            "base_model": cfg.model.model,
        }
        return {"mlm_path": str(save_mlm(model, tokenizer, cfg, info))}

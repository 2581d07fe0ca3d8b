"""What a run would do, checked without loading weights or creating a run directory.

`fedml-fes run|mpirun|bench --dry-run` prints it; a real run performs the same checks before it
creates its run directory (`check_before_run`), so bad data, a pattern without a mask or a
verbalizer missing a class is one line in seconds, with nothing left behind. The model is
built on the meta device (every shape, no weights), which is enough to count the bytes one
client update sends.

The checks that need no model (its path and config.json, the data) run before torch is
imported: on a small machine that import alone takes seconds, and a wrong path or a broken CSV
should be refused at once.
"""

from __future__ import annotations

import numpy as np

from ..config import FesConfig
from ..data.federated import build_federated_data
from ..errors import FesError
from ..model_files import max_positions, resolve_model_path
from ..pretrain.cache import load_cached_info
from ..pretrain.source import mlm_build_config, mlm_origin


def check_before_run(cfg: FesConfig) -> None:
    """What can fail without loading a model (the model path, max_seq_length against the
    model's position table, the MLM build's config), checked before a run directory is created
    so bad input leaves nothing behind."""
    resolve_model_path(cfg.model.model)
    check_seq_length(cfg)
    mlm_build_config(cfg)


def check_seq_length(cfg: FesConfig) -> None:
    """model_args.max_seq_length within what the model can embed (its config.json, no weights)."""
    m = cfg.model
    limit, where = max_positions(m.model)
    if limit is not None and m.max_seq_length > limit:
        raise FesError(
            f"model_args.max_seq_length is {m.max_seq_length}, more than the {limit} positions model "
            f"{m.model} can embed (max_position_embeddings in {where})"
        )


def preview_run(cfg: FesConfig) -> list[str]:
    """The checks a run would fail on, run now; lines that say what the run would do."""
    check_before_run(cfg)
    data, _ = build_federated_data(cfg)  # bad data: one line before torch is imported
    from ..models import is_causal_lm, load_tokenizer
    from ..tuning.params import payload_bytes
    from .job import with_validation
    from .methods import get_method, pvp_for

    data = with_validation(data, cfg)
    method = get_method(cfg.train.method)
    tokenizer = load_tokenizer(cfg.model.model)
    model = method.build_model(cfg, data.classes, tokenizer, weights=False)  # checks the PVP too
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    pools = np.array([len(c.unlabeled.texts) for c in data.clients])
    gold = {c.client_id: c.num_gold for c in data.clients if c.num_gold}
    held = len(data.validation) if data.validation is not None else 0  # gold labels kept for validation
    training_gold = data.pooled_gold()  # after any validation hold-out
    per_class = training_gold.class_counts() if training_gold is not None else [0] * len(data.classes)
    missing = [name for name, n in zip(data.classes, per_class) if n == 0]
    d, t = cfg.data, cfg.train
    late = cfg.for_round(  # after any warm-up
        t.comm_round, False, getattr(method, "bias_only", False), getattr(method, "every_layer", False)
    ).train
    lines = [
        f"dry run of {cfg.source}: checked, nothing loaded, no run directory created",
        f"data: {d.dataset}, {int(pools.sum()) + sum(gold.values()) + held} training texts, {len(data.test.texts)} test, "
        f"{len(data.classes)} classes ({', '.join(data.classes)})",
        f"partition: {data.num_clients} clients ({d.partition_method}, alpha {d.partition_alpha}); unlabeled pool "
        f"per client min {pools.min()} / median {int(np.median(pools))} / max {pools.max()}",
        f"gold labels: {sum(gold.values()) + held} on {len(gold)} client(s)"
        + (f", {held} of them held out of training as validation" if held else "")
        + ": "
        + ", ".join(f"{c}: {n}" for c, n in sorted(gold.items())),
        "gold labels per class, for training: "
        + ", ".join(f"{name} {n}" for name, n in zip(data.classes, per_class))
        + (f" (no training label for {', '.join(missing)}: only the MLM's prior can predict it)" if missing else ""),
        f"method: {method.name}, {t.comm_round} rounds x {t.client_num_per_round} clients, {late.epochs} local epoch(s), "
        f"batch {t.batch_size}, lr {late.learning_rate:g}",
    ]
    mlm_cfg = mlm_build_config(cfg) if getattr(method, "prompt", False) else None
    if mlm_cfg is not None:
        cached = load_cached_info(mlm_cfg) is not None
        lines.append(
            f"MLM head: {mlm_origin(cfg.model.mlm_from, cfg.model.mlm_on_job_data)}, "
            + ("cached" if cached else "built first (a one-time federated MLM run), then cached")
        )
    if getattr(method, "prompt", False):  # FedBERT's MLM build has no prompt
        pattern, verbalizer = pvp_for(cfg, is_causal_lm(cfg.model.model))
        lines.append(
            f"prompt: {pattern!r}, verbalizer "
            + ", ".join(f"{c} -> {verbalizer.get(c, '?')}" for c in data.classes[:8])
            + (" ..." if len(data.classes) > 8 else "")
        )
    plan = getattr(method, "plan", None)
    lines.append(
        f"trainable: {sum(p.numel() for p in trainable.values()):,} parameters in {len(trainable)} tensors"
        + (f" ({plan.describe()})" if plan is not None else "")
        + (f", the class head at lr {method.head_lr:g}" if "class_head" in trainable else "")
        + (
            f", LoRA rank {cfg.tuning.lora_rank} on query/value beside the biases at lr {cfg.tuning.lora_learning_rate:g}"
            if getattr(method, "lora_beside", False)
            else ""
        )
        + (
            f", (IA)^3 instead of the biases at lr {cfg.tuning.ia3_learning_rate:g}"
            if getattr(method, "ia3", False)
            else ""
        )
        + f"; one client update: {payload_bytes(trainable):,} bytes each way"
    )
    return lines

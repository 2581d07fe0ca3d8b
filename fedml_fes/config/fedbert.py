"""FedBERT's two jobs: the federated MLM build (mlm_args) and split learning (split_args), each
with its checks."""

from __future__ import annotations

from dataclasses import dataclass

from .common import check


@dataclass
class MlmConfig:
    """FedBERT-style federated MLM pre-training on the clients' unlabeled text."""

    local_steps: int = 10  # optimizer steps per selected client per round
    mask_probability: float = 0.15
    heldout_texts: int = 400  # test texts used for masked-token accuracy
    # One learning-rate schedule over the whole build (comm_round x local_steps optimizer
    # steps; train_args.learning_rate is the peak): a short build needs a large lr early and
    # a small one late, which a per-round constant cannot give. constant | linear | cosine
    lr_schedule: str = "constant"
    warmup_fraction: float = 0.0  # share of the build's steps spent warming the lr up from 0
    # Mask rate while training only (0: mask_probability); evaluation always masks
    # mask_probability. More targets per sentence = more signal per forward pass.
    train_mask_probability: float = 0.0
    # Dropout while building (-1: the model's own). A short build underfits, so dropout only
    # slows it; the saved model keeps its config's dropout for later fine-tuning.
    dropout: float = -1.0
    # Start the untrained head's vocabulary bias at the log unigram frequencies of the clients'
    # text (a token histogram each client could send once) instead of 0.
    unigram_bias: bool = False
    # Train the softmax over the train_vocab most frequent tokens of the clients' text (plus
    # each batch's targets) instead of all ~30k: the projection is a third of a step. 0: all.
    train_vocab: int = 0


LR_SCHEDULES = ("constant", "linear", "cosine")


def validate_mlm(m: MlmConfig) -> None:
    """mlm_args' values (the federated MLM build), one error line each."""
    check(0 < m.mask_probability < 1, f"mlm_args.mask_probability must be in (0, 1), got {m.mask_probability}")
    check(m.local_steps >= 1, f"mlm_args.local_steps must be >= 1, got {m.local_steps}")
    check(
        m.heldout_texts >= 1,
        f"mlm_args.heldout_texts must be >= 1 (test texts for masked-token accuracy), got {m.heldout_texts}",
    )
    check(
        m.lr_schedule in LR_SCHEDULES,
        f"mlm_args.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got '{m.lr_schedule}'",
    )
    check(0 <= m.warmup_fraction < 1, f"mlm_args.warmup_fraction must be in [0, 1), got {m.warmup_fraction}")
    check(
        0 <= m.train_mask_probability < 1,
        f"mlm_args.train_mask_probability must be in [0, 1) (0: mask_probability), got {m.train_mask_probability}",
    )
    check(m.train_vocab >= 0, f"mlm_args.train_vocab must be >= 0 (0: the whole vocabulary), got {m.train_vocab}")
    check(
        m.dropout == -1 or 0 <= m.dropout < 1,
        f"mlm_args.dropout must be in [0, 1) or -1 (the model's own), got {m.dropout}",
    )


@dataclass
class SplitConfig:
    """FedBERT split learning (`fedml-fes split`): the client holds the embeddings (and the
    bottom `client_layers` encoder layers) and the task head, the server the encoder body;
    activations and gradients cross the link every step (fedml_fes/splitfed/)."""

    task: str = "mlm"  # mlm (FedBERT pre-training) | classification
    schedule: str = "parallel"  # parallel (SplitFed: body copies averaged) | sequential (SplitNN hand-on)
    client_layers: int = 0  # encoder layers below the cut kept on the client (0: embeddings only, FedBERT)
    local_steps: int = 10  # split steps (batches) per client per round
    wire_dtype: str = "float32"  # float32 | float16: activations and gradients on the wire
    labels: str = "gold"  # classification: gold (the few-shot labels) | all (every train example labeled)
    save_model: bool = False  # write the merged model (save_pretrained) into <run_dir>/model at the end


SPLIT_TASKS = ("mlm", "classification")
SPLIT_SCHEDULES = ("parallel", "sequential")


def validate_split(s: SplitConfig) -> None:
    """split_args' values, one error line each; client_layers against the model's depth is
    checked when the model is split (splitfed.parts.split_model)."""
    check(s.task in SPLIT_TASKS, f"split_args.task must be one of {', '.join(SPLIT_TASKS)}, got '{s.task}'")
    check(
        s.schedule in SPLIT_SCHEDULES,
        f"split_args.schedule must be one of {', '.join(SPLIT_SCHEDULES)}, got '{s.schedule}'",
    )
    check(s.client_layers >= 0, f"split_args.client_layers must be >= 0 (0: embeddings only), got {s.client_layers}")
    check(s.local_steps >= 1, f"split_args.local_steps must be >= 1, got {s.local_steps}")
    check(
        s.wire_dtype in ("float32", "float16"),
        f"split_args.wire_dtype must be float32 or float16, got '{s.wire_dtype}'",
    )
    check(s.labels in ("gold", "all"), f"split_args.labels must be gold or all, got '{s.labels}'")

"""What a run trains and how: model_args, train_args, tuning_args and adapter_args, each with its
checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FesError
from .common import OFFLINE_MINILM, check

METHODS = (
    "fedcls",
    "prompt_only",
    "pseudo_only",
    "fedfsl",
    "fedfsl_bias",
    "fes",
    "fes_no_cp",
    "fes_no_rf",
    "fes_no_dc",
    "fedbert_mlm",
    "adapter",
    "lora",
)
ADAPTER_METHODS = ("adapter", "lora")  # read adapter_args


@dataclass
class ModelConfig:
    """Any HF model id or local path; `offline:all-MiniLM-L6-v2` is the packaged default."""

    model: str = OFFLINE_MINILM  # roberta-large is the paper's choice
    max_seq_length: int = 128
    # A fedbert_mlm config whose cached build supplies the MLM head (built first if missing);
    # for models shipped without one, like the offline MiniLM. Empty: use `model` as is.
    mlm_from: str = ""
    # Build that head on this job's own clients' text (FedBERT's premise: pre-train on the data the
    # clients hold): mlm_from then gives the recipe, the job's data_args replace its data. One
    # build per dataset, shared by every seed and method of it.
    mlm_on_job_data: bool = False
    tuning: str = "full"  # full | bias (BitFit: biases only) | plan (tuning_args' layer plan)


def validate_model(m: ModelConfig) -> None:
    """model_args' values, one error line each."""
    check(m.max_seq_length >= 8, f"model_args.max_seq_length must be >= 8, got {m.max_seq_length}")
    check(m.model != "", "model_args.model must name an HF model id or a local path")
    check(
        not m.mlm_on_job_data or bool(m.mlm_from),
        "model_args.mlm_on_job_data needs model_args.mlm_from (the fedbert_mlm recipe to build with)",
    )
    check(
        m.tuning in ("full", "bias", "plan"),
        f"model_args.tuning must be full, bias or plan, got '{m.tuning}'",
    )


@dataclass
class TrainConfig:
    """Federated optimisation settings shared by all methods."""

    method: str = "fedcls"  # fedcls | fedbert_mlm
    federated_optimizer: str = "FedAvg"
    comm_round: int = 10
    client_num_per_round: int = 4
    epochs: int = 1
    batch_size: int = 4
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    eval_batch_size: int = 64
    frequency_of_the_test: int = 1
    # Robust aggregation, opt-in (FedML's defences are too): with >= 3 valid updates in an
    # aggregation, one whose change (update minus the current global model, L2 norm over all
    # trainable tensors) is more than this many times the median change of those updates is
    # rejected and logged, never averaged. Off by default because in few-shot FL the clients
    # that hold gold labels are the outliers by design: their updates are many times the
    # pseudo-label clients' (which the model already agrees with), and at 10x the screen
    # rejected a gold client's update in 13 of the committed benchmark runs
    # (docs/TUNING.md). 0: off; the absolute bound always applies (a non-finite change, or
    # one over 1e6 x the global's norm). See fedml_fes/tuning/params.py screen_updates.
    robust_norm_factor: float = 0.0
    # Class-balanced loss on a client's gold labels: each gold example weighted by
    # n / (classes present x its class's count), so a few-shot set skewed toward one class
    # (64 labels: 43 sports) does not pull the model's prior toward that class. Pseudo labels
    # keep weight 1. Off by default (the paper's plain cross-entropy); docs/TUNING.md.
    balance_gold_classes: bool = False
    # FedRS's restricted softmax (Li & Zhan, KDD 2021) at alpha 0: a client's loss takes the
    # softmax over the classes its own labels name (gold, and its pseudo labels' first
    # classes) only. With 64 gold labels on two or three clients, a client without a class's
    # labels otherwise pushes that class down for everyone (Gemma, AG News seed 11: 3 `Sports`
    # labels, FeS ends with `Sports` 0% right). Off by default (the paper's plain
    # cross-entropy); docs/TUNING.md.
    restricted_softmax: bool = False
    # AdamW as torch's fused kernel (one vectorized pass over a tensor's weights, moments and
    # gradient) instead of its loop of elementwise ops per tensor, which sampled at 44% of a
    # FedFSL run's training time on one CPU core. A SmolLM2 training step 9.7 -> 7.9 s (1.23x,
    # measured beside two other runs: benchmarks/results/adamw_step.json). The same update
    # computed differently: weights 1e-4 apart after 7 steps at lr 5e-5, not bit for bit, so
    # off by default and runs made before it reproduce exactly
    fused_optimizer: bool = False
    # HF gradient checkpointing while a client trains: each layer's activations are recomputed
    # in the backward pass instead of held (SmolLM2, batch 4 x 64 tokens: 0.4 GB less at the
    # peak, client training 13-21% slower; the same weights bit for bit). docs/BENCHMARK.md
    gradient_checkpointing: bool = False
    # with gradient_checkpointing, whether a plan that trains no weight matrix (biases and norm
    # gains only: FedFSL-BIAS, FeS's bias-only top) checkpoints too. Such a step holds no
    # optimizer state or gradients worth the name, and the recompute costs it a forward pass:
    # SmolLM2 FedFSL-BIAS, 3 rounds: clients' training 389 -> 304 s, peak 1.78 -> 2.08 GB, same
    # rows (benchmarks/results/run_memory_bias.json). false: those plans hold their activations
    checkpoint_bias_only: bool = True


def validate_train(t: TrainConfig, client_num_in_total: int, given: "set[str] | frozenset[str] | None" = None) -> None:
    """train_args' values, one error line each. `given`: the 'section.key's the config set
    itself (None: all); the default client_num_per_round on fewer clients takes them all."""
    check(t.method in METHODS, f"train_args.method '{t.method}' is not one of {', '.join(METHODS)}")
    check(
        t.federated_optimizer == "FedAvg",
        f"train_args.federated_optimizer '{t.federated_optimizer}' is not supported (FedAvg)",
    )
    check(t.comm_round >= 1, f"train_args.comm_round must be >= 1, got {t.comm_round}")
    check(t.client_num_per_round >= 1, f"train_args.client_num_per_round must be >= 1, got {t.client_num_per_round}")
    if t.client_num_per_round > client_num_in_total:
        if given is None or "train_args.client_num_per_round" in given:
            raise FesError(
                f"train_args.client_num_per_round is {t.client_num_per_round}, more than the "
                f"{client_num_in_total} clients of data_args.client_num_in_total"
            )
        t.client_num_per_round = client_num_in_total  # the default (4) on fewer clients: all of them
    check(t.epochs >= 1, f"train_args.epochs must be >= 1, got {t.epochs}")
    check(t.batch_size >= 1, f"train_args.batch_size must be >= 1, got {t.batch_size}")
    check(t.eval_batch_size >= 1, f"train_args.eval_batch_size must be >= 1, got {t.eval_batch_size}")
    check(t.learning_rate > 0, f"train_args.learning_rate must be > 0, got {t.learning_rate}")
    check(t.weight_decay >= 0, f"train_args.weight_decay must be >= 0, got {t.weight_decay}")
    check(t.frequency_of_the_test >= 1, f"train_args.frequency_of_the_test must be >= 1, got {t.frequency_of_the_test}")
    check(
        t.robust_norm_factor == 0 or t.robust_norm_factor >= 1,
        f"train_args.robust_norm_factor must be 0 (off) or >= 1 (x the median update change), "
        f"got {t.robust_norm_factor}",
    )


@dataclass
class TuningConfig:
    """Depth/capacity co-planning: top layers full, middle layers bias-only, bottom frozen."""

    full_layers: int = 0  # top encoder layers trained fully
    # the layers below them: biases only; everything lower is frozen. -1: the top third of the
    # encoder, the paper's ratio (RoBERTa-large: biases of layers 16-23 of 24; MiniLM: 2 of 6)
    bias_layers: int = -1
    activation_cache: bool = True  # cache frozen-bottom outputs per client (skip recompute)
    # learning rate whenever only biases train (fedfsl_bias; fes with no full layer): a bias
    # step must be far larger than a full fine-tuning step. The paper's artifact: 1e-3.
    # 0: train_args.learning_rate
    bias_learning_rate: float = 0.0
    # the same when the biases of every layer train (fedfsl_bias: BitFit over the whole model),
    # where one step moves all of them at once: 0: bias_learning_rate (docs/METHODS.md)
    all_bias_learning_rate: float = 0.0
    # local epochs whenever only biases train. Bias-only steps are cheap (the frozen bottom
    # comes from the activation cache), and a bias-only model needs many more of them than
    # a fully tuned one to fit the same labels (BitFit). 0: train_args.epochs
    bias_epochs: int = 0
    # FeS's bias-only layers also train their normalization gains (LN-tuning): on a model
    # without norm biases (RMSNorm: Llama, SmolLM2) the closest analogue of the LayerNorm
    # bias BitFit trains on RoBERTa. A few hundred values per norm: upload stays tiny. On
    # SmolLM2 it cost FeS 4.0 points on the tuning seeds (docs/TUNING.md): off by default.
    norm_gains: bool = False
    # the prompt model scores the classes with a head of its own, a copy of the verbalizer words'
    # output rows, trained beside the biases wherever only biases train (fes's plan, fedfsl_bias),
    # at train_args.learning_rate: WARP's class embeddings. C x hidden values (TREC-6 on SmolLM2:
    # 3,456). On SmolLM2 it moved FeS by -0.4 points on the tuning seeds (docs/TUNING.md): off
    # by default.
    verbalizer_head: bool = False
    # LoRA (Hu et al. 2021) of this rank on the attention query and value projections of the
    # plan's bias-only layers, beside their biases: the capacity a rank-r update adds where
    # biases alone cannot rotate attention. SmolLM2 at rank 1 over its 10 bias-only layers:
    # 19,200 values per update beside 51,840 biases. Its A and B train at
    # lora_learning_rate (alpha = 2 x rank: updates scaled by 2). On SmolLM2 rank 1 moved FeS by
    # -0.4 points on the tuning seeds for 37% more bytes per update (docs/TUNING.md): 0, off,
    # the paper's plan, by default
    lora_rank: int = 0
    lora_learning_rate: float = 1e-3
    # which linear maps' biases train wherever biases train (fes's plan, fedfsl_bias): names the
    # end of each map's module path (SmolLM2/Llama `gate_proj`, `q_proj`; RoBERTa
    # `intermediate.dense`); empty: every bias, BitFit. BitFit (Ben Zaken et al., ACL 2022) found
    # the query and the MLP's intermediate biases change most and train almost as well alone,
    # so a few sites over more layers can cost no more upload than every site over a few.
    bias_sites: list = field(default_factory=list)
    # what the plan's bias-only layers train (fes): `bias`, their biases (the paper's, BitFit), or
    # `ia3`, (IA)^3 scalings instead (Liu et al. 2022, T-Few, built for few-shot fine-tuning; PEFT's
    # IA3): learned vectors, initialised to 1, that rescale the attention's keys and values and the
    # MLP's down-projection input. A bias adds the same vector whatever the input; a scaling moves
    # each feature in proportion to the input's own. SmolLM2's top third: 19,200 values per
    # update against 51,840 biases. At tuning_args.ia3_learning_rate (T-Few's 3e-3)
    capacity: str = "bias"
    ia3_learning_rate: float = 3e-3


CAPACITIES = ("bias", "ia3")


def validate_tuning(tu: TuningConfig) -> None:
    """tuning_args' values, one error line each; the layer counts against the model's depth
    are checked when the plan is made."""
    check(
        tu.full_layers >= 0 and tu.bias_layers >= -1,
        "tuning_args.full_layers must be >= 0 and bias_layers >= 0 (or -1: the top third), "
        f"got {tu.full_layers} and {tu.bias_layers}",
    )
    check(tu.bias_learning_rate >= 0, f"tuning_args.bias_learning_rate must be >= 0, got {tu.bias_learning_rate}")
    check(
        tu.all_bias_learning_rate >= 0,
        f"tuning_args.all_bias_learning_rate must be >= 0, got {tu.all_bias_learning_rate}",
    )
    check(tu.bias_epochs >= 0, f"tuning_args.bias_epochs must be >= 0 (0: train_args.epochs), got {tu.bias_epochs}")
    check(tu.lora_rank >= 0, f"tuning_args.lora_rank must be >= 0 (0: off), got {tu.lora_rank}")
    check(tu.lora_learning_rate > 0, f"tuning_args.lora_learning_rate must be > 0, got {tu.lora_learning_rate}")
    check(
        tu.capacity in CAPACITIES,
        f"tuning_args.capacity must be one of {', '.join(CAPACITIES)}, got {tu.capacity!r}",
    )
    check(tu.ia3_learning_rate > 0, f"tuning_args.ia3_learning_rate must be > 0, got {tu.ia3_learning_rate}")
    check(
        isinstance(tu.bias_sites, list) and all(isinstance(x, str) and x.strip(".") for x in tu.bias_sites),
        f"tuning_args.bias_sites must be a list of module names (e.g. [gate_proj]), got {tu.bias_sites!r}",
    )


@dataclass
class AdapterConfig:
    """AutoFedNLP-style adapter / LoRA tuning (train_args.method adapter | lora) through HF PEFT.

    PEFT modules go in encoder layers `depth`..L-1; everything below (embeddings included) is
    frozen, so its outputs can come from the activation cache (tuning_args.activation_cache).
    Only the PEFT tensors (and the prompt's class bias, prompt_args.train_class_bias) train and
    travel. See fedml_fes/tuning/adapters.py for what each method adapts.
    """

    depth: int = -1  # first encoder layer with adapters; -1: the bottom third frozen (MiniLM: 2 of 6)
    width: int = 8  # bottleneck width = LoRA rank r
    alpha: float = 16.0  # LoRA scaling: updates are scaled by alpha / width
    dropout: float = 0.0  # dropout on the adapters' input while training
    learning_rate: float = 0.0  # 0: train_args.learning_rate (adapters usually want ~1e-3)
    # AutoFedNLP's progressive configurator (fedml_fes/tuning/autoconfig.py). fixed: depth and
    # width as above for the whole run. progressive: they are the start; trial groups try one
    # step deeper / twice as wide and the main configuration upgrades when a trial wins on
    # validation gain per emulated device second
    configurator: str = "fixed"
    min_depth: int = -1  # progressive: the deepest the adapters may reach (-1: the bottom third frozen)
    max_width: int = 32  # progressive: the widest they may grow
    trial_rounds: int = 2  # progressive: rounds in each trial period before a decision
    trial_share: float = 0.4  # progressive: share of each round's clients that train the trial configurations


def validate_adapter(a: AdapterConfig) -> None:
    """adapter_args' values, one error line each; depth against the model's layer count is
    checked when the model is built (tuning.adapters.adapter_plan)."""
    check(
        a.depth >= -1,
        f"adapter_args.depth must be >= 0 (the first layer with adapters) or -1 (the bottom "
        f"third frozen), got {a.depth}",
    )
    check(a.width >= 1, f"adapter_args.width must be >= 1 (bottleneck width / LoRA rank), got {a.width}")
    check(a.alpha > 0, f"adapter_args.alpha must be > 0, got {a.alpha}")
    check(0 <= a.dropout < 1, f"adapter_args.dropout must be in [0, 1), got {a.dropout}")
    check(
        a.learning_rate >= 0,
        f"adapter_args.learning_rate must be >= 0 (0: train_args.learning_rate), got {a.learning_rate}",
    )
    check(
        a.configurator in ("fixed", "progressive"),
        f"adapter_args.configurator must be fixed or progressive, got '{a.configurator}'",
    )
    check(a.min_depth >= -1, f"adapter_args.min_depth must be >= 0 or -1 (the bottom third frozen), got {a.min_depth}")
    check(a.max_width >= a.width, f"adapter_args.max_width ({a.max_width}) must be >= adapter_args.width ({a.width})")
    check(a.trial_rounds >= 1, f"adapter_args.trial_rounds must be >= 1, got {a.trial_rounds}")
    check(0 < a.trial_share < 1, f"adapter_args.trial_share must be in (0, 1), got {a.trial_share}")

"""Typed run configuration parsed from a FedML-style YAML file.

The YAML has FedML's section layout (`common_args`, `data_args`, `model_args`,
`train_args`, ...). FedML flattens all sections into one `args` namespace; we keep them as
dataclasses so that every key is declared once, with its type and default, and a typo is
an error that names the key instead of a silently ignored attribute.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import yaml

from .errors import FesError

OFFLINE_MINILM = "offline:all-MiniLM-L6-v2"

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
DATASETS = (
    "bbc_news",
    "agnews",
    "yelp_review_full",
    "yahoo_answers",
    "mnli",
    "snli",
    "trec",
    "movie_sentiment",
    "custom",
    "hf",
    "fednlp_h5",
)
# the names users also type (HF's dataset ids, the paper's short names) for the built-in readers
DATASET_ALIASES = {"ag_news": "agnews", "yelp_full": "yelp_review_full", "yahoo": "yahoo_answers"}
PARTITIONS = ("uniform", "niid_label", "niid_quantity", "fednlp_h5")


@dataclass
class CommonConfig:
    """Run identity and where files go."""

    training_type: str = "simulation"  # FedML's key: simulation | cross_silo
    random_seed: int = 0
    run_name: str = ""  # empty: <method>-<dataset>-<seed>-<time>
    output_dir: str = "runs"  # run directories are created below it
    cache_dir: str = ""  # empty: <output_dir>/cache (e.g. the federated MLM build)
    torch_threads: int = 0  # 0: torch's default; pin it to compare runtimes bit for bit
    # forward passes in float32 or under bfloat16 autocast; auto: bfloat16 where the hardware
    # has it (CUDA, CPUs with AMX / AVX-512 BF16), else float32 (fedml_fes/precision.py)
    precision: str = "auto"


@dataclass
class DataConfig:
    """Which dataset, how it is split across clients, and which examples carry gold labels.

    The defaults are the BBC News demo; the paper's per-dataset settings live in
    run_configs/data_*.yaml.
    """

    dataset: str = "bbc_news"
    # folder with the official layout (agnews/yelp_review_full/yahoo_answers: train.csv,
    # test.csv; mnli: GLUE train.tsv, dev_matched.tsv; snli: folder, .zip or .tar.gz)
    data_dir: str = ""
    client_num_in_total: int = 20
    partition_method: str = "niid_label"  # uniform | niid_label | niid_quantity | fednlp_h5
    partition_alpha: float = 1.0  # niid_label: Dirichlet label skew
    partition_beta: float = 1.0  # niid_quantity: client sizes ~ Dirichlet(beta)
    gold_labels: int = 64  # n: gold labels in total over all clients
    gold_clients: int = 0  # xi: clients that may own gold labels (0: all clients)
    gold_sparsity: float = 0.001  # gamma: Dirichlet concentration of labels over owners
    test_fraction: float = 0.2  # for datasets without an official test split
    max_train_examples: int = 0  # 0: all; else a seeded stratified subsample
    max_test_examples: int = 0  # 0: all; else a seeded stratified subsample
    # dataset: custom (your CSV/TSV/JSONL) and hf: which columns hold what
    train_file: str = ""
    test_file: str = ""  # empty: a seeded stratified test_fraction split of train_file
    text_columns: list = field(default_factory=list)  # joined into text_a (hf default: [text])
    text_b_columns: list = field(default_factory=list)  # sentence pairs: joined into text_b
    label_column: str = ""  # hf default: label
    classes: list = field(default_factory=list)  # label order; empty: sorted labels (hf: its names)
    # dataset: custom, CSV/TSV layout (docs/CUSTOM_DATA.md). No header row (the official AG News /
    # Yelp / Yahoo CSVs): the columns above are then 0-based column numbers.
    csv_header: bool = True
    delimiter: str = ""  # one character, or tab; empty: by suffix (.csv ",", .tsv tab)
    # classes.txt, one class name per line: the label column then holds class ids, mapped to
    # these names by position (the official layouts number them from 1). Excludes `classes`.
    classes_file: str = ""
    label_index_base: int = 1  # the id of the file's first class: 1 (official layouts) or 0
    # dataset: hf (Hugging Face datasets, needs a network or a filled cache)
    hf_dataset: str = ""
    hf_config: str = ""
    hf_train_split: str = "train"
    hf_test_split: str = "test"  # empty: a seeded stratified test_fraction split
    # FedNLP h5 files: dataset fednlp_h5 reads the data file, partition_method fednlp_h5 the
    # partition file's group (e.g. niid_label_clients=100_alpha=1.0)
    fednlp_data_file: str = ""
    fednlp_partition_file: str = ""
    fednlp_partition_name: str = ""


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
    # Robust aggregation: with >= 3 valid updates in an aggregation, one whose change (update
    # minus the current global model, L2 norm over all trainable tensors) is more than this
    # many times the median change of those updates is rejected and logged, never averaged.
    # 0: off (the absolute bound still applies: a change over 1e6 x the global's norm is always
    # rejected). See fedml_fes/tuning/params.py screen_updates.
    robust_norm_factor: float = 10.0


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


@dataclass
class PromptConfig:
    """PET-style pattern-verbalizer pair: a built-in one by dataset and id, or your own."""

    pvp: str = ""  # built-in PVP name; empty: the dataset's
    pattern_id: int = 0
    pattern: str = ""  # your own, with {text_a}, optional {text_b}, and one {mask}
    verbalizer: dict = field(default_factory=dict)  # your own: class name -> word
    # the C-sized bias added to the class logits; off keeps the MLM's own verbalizer prior,
    # so a few skewed gold labels cannot turn into a skewed class prior under a large step
    train_class_bias: bool = True


@dataclass
class PseudoConfig:
    """Pseudo-labeling passes (the inference runtime) and what they keep."""

    start_round: int = 0  # no labeling pass before this round (warm up on gold labels first)
    label_every: int = 1  # f: a labeling pass every f rounds
    label_clients: int = 5  # n: clients that label per pass
    # FedFSL's static pacing: every labeling client holds this many pseudo labels after each
    # event (a constant, the reference code's 100; relabeled by the current model each time)
    per_pass: int = 100
    confidence_threshold: float = 0.0  # keep only predictions at least this confident (0: off)
    skip_if_worse_than_zero_shot: bool = False  # no pass while the model is below zero-shot accuracy
    soft_labels: bool = False  # train on the predicted distribution instead of the argmax
    class_balance: str = "none"  # none | gold | predicted: per-class quotas for kept labels
    # the gold-only warm-up rounds (before start_round) may train harder than the pseudo-label
    # rounds: bias-only plans need many steps on the gold labels, but the same step size on a
    # client's handful of one-sided pseudo labels drags the shared biases to its class
    warmup_learning_rate: float = 0.0  # 0: train_args.learning_rate
    warmup_epochs: int = 0  # 0: train_args.epochs


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
    # local epochs whenever only biases train. Bias-only steps are cheap (the frozen bottom
    # comes from the activation cache), and a bias-only model needs many more of them than
    # a fully tuned one to fit the same labels (BitFit). 0: train_args.epochs
    bias_epochs: int = 0


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


@dataclass
class FilterConfig:
    """Representational filtering: which unlabeled samples are worth labeling at all."""

    method: str = "vote_k"  # vote_k | random | none
    proxy_model: str = OFFLINE_MINILM  # any sentence-transformers model name or path
    knn: int = 150  # k of V(x): nearest neighbours by cosine (the paper's 150)
    # ... but at most this share of the client's pool (at least 1): the artifact's 150 of about
    # 1,200 texts per AG News client. With k >= pool - 1 every V(x) is the whole pool, every
    # sample scores the same and vote-k returns the pool in its stored order (1.0: that cap only)
    knn_pool_share: float = 0.125
    rho: float = 10.0  # > 1: how strongly already-covered neighbourhoods are discounted
    # candidates a labeling client infers: this fraction of its pool, taken from the top of the
    # filter's ranking (never fewer than the event's budget); the most confident are kept.
    # 0: the paper's per-dataset value (AG News and Yahoo 0.1, MNLI 0.2, Yelp-F 0.5; others 0.1)
    candidate_fraction: float = 0.0


@dataclass
class PacingConfig:
    """Curriculum pacing <f, n, k>, chosen online by AUG-E (the paper's Algorithm 1)."""

    mode: str = "adaptive"  # adaptive (AUG-E configurator) | static (one <f, n, k>)
    f: int = 1  # static: label every f rounds
    n: int = 5  # static: on n clients
    k: float = 10.0  # static: k% more of each client's pool per pass
    grid: list | None = None  # "f,n,k" strings; unset: the default 12 (f 1|5, n 2|4, k 1|2|4 %)
    trial_rounds: int = 1  # r: rounds each configuration is tried
    top: int = 4  # t: configurations kept and re-trialled when the current one falls below s
    parallel_trials: int = 8  # trials running at once, each on its own group of idle clients
    switch_threshold: float = 0.0  # s: switch when the current AUG-E falls below it
    eta: float = 1.0
    theta: float = 1.0
    infer_latency_s: float = 0.5  # l_i per batch (paper constants: TX2, bias-only)
    train_latency_s: float = 1.0  # l_t per batch
    # who trains each round, among the clients holding labels: uniform (FedAvg's draw), or
    # labels: drawn with probability proportional to the labels a client holds (gold + pseudo),
    # so that a round is rarely left to a few clients with a handful of pseudo labels each
    train_sampling: str = "uniform"
    # gold-labeled examples (never test data) the server scores for AUG-E; in a deployment
    # the gold clients would report this accuracy
    val_examples: int = 200
    # share of the gold labels held out of training as that validation set, where a server decides
    # on it (adaptive pacing, AutoFedNLP's progressive configurator). 0: it scores on the training
    # labels, which a few rounds fit (accuracy 1.0): every trial then gains 0 and the cheapest wins
    val_holdout: float = 0.25
    # what a trial's gain (delta_acc) is measured in on that validation set: accuracy (the paper's),
    # or log_likelihood, the mean log-probability of the true labels, which still moves when every
    # held-out label is already predicted right (16 labels from one or two skewed clients)
    val_signal: str = "accuracy"


@dataclass
class CostConfig:
    """Cost emulation: which device profiles and network a run's report applies (docs/BENCHMARK.md).

    Runs record device-independent work (FLOPs, bytes, memory) in client_costs.csv; these
    settings only say how reports turn it into emulated time and energy.
    """

    devices: list = field(default_factory=lambda: ["jetson_tx2", "rpi_4b", "host"])  # profile names or .yaml paths
    device_dir: str = ""  # extra folder searched first for <name>.yaml profiles
    bandwidth_MBps: float = 1.0  # downlink, MB/s (10^6 bytes); the paper's slow link
    uplink_MBps: float = 0.0  # 0: same as bandwidth_MBps
    # seconds each message pays beyond its bytes (handshakes, requests, round trips); 0: the
    # paper's model. Measured: docs/COST_MODEL.md "The network term against a real link"
    message_overhead_s: float = 0.0
    bandwidth_sweep: list = field(default_factory=lambda: [0.1, 0.3, 1.0, 3.0, 10.0])  # MB/s
    convergence_tail: int = 3  # convergence accuracy = mean of the last N evaluated rounds
    measure_memory: bool = True  # peak training memory from tensors saved for backward


@dataclass
class CommConfig:
    """Transport settings (FedML keys)."""

    backend: str = "MPI"
    mpi_host_file: str = "mpi/mpi_host_file"
    worker_timeout_s: float = 600.0  # a worker silent this long ends the run
    # cross-silo (FedML gRPC / MQTT_S3), see docs/DEPLOY.md
    grpc_ipconfig_path: str = "deploy/grpc_ipconfig.csv"
    customized_training_mqtt_config: dict = field(default_factory=dict)
    customized_training_s3_config: dict = field(default_factory=dict)
    silo_num: int = 0  # client processes; 0: as many as the gRPC ipconfig lists
    run_id: str = ""
    round_timeout_s: float = 300.0  # a phase waits this long, then aggregates what arrived
    join_timeout_s: float = 120.0  # every client process must join within this
    connect_timeout_s: float = 5.0  # broker / endpoint reachability checks
    # TLS for cross-silo gRPC and MQTT, all three or none (docs/DEPLOY.md); `{rank}` in a path is
    # the process's rank, so one config serves every process. Empty: plaintext, trusted networks only.
    tls_ca: str = ""  # the CA every process trusts
    tls_cert: str = ""  # this process's certificate, e.g. certs/rank-{rank}.crt
    tls_key: str = ""  # its private key


@dataclass
class DeviceConfig:
    using_gpu: bool = False
    gpu_id: int = 0


@dataclass
class TrackingConfig:
    enable_wandb: bool = False  # accepted for FedML compatibility; must stay false offline
    log_level: str = "WARNING"


@dataclass
class FesConfig:
    common_args: CommonConfig = field(default_factory=CommonConfig)
    data_args: DataConfig = field(default_factory=DataConfig)
    model_args: ModelConfig = field(default_factory=ModelConfig)
    train_args: TrainConfig = field(default_factory=TrainConfig)
    mlm_args: MlmConfig = field(default_factory=MlmConfig)
    prompt_args: PromptConfig = field(default_factory=PromptConfig)
    pseudo_args: PseudoConfig = field(default_factory=PseudoConfig)
    tuning_args: TuningConfig = field(default_factory=TuningConfig)
    adapter_args: AdapterConfig = field(default_factory=AdapterConfig)
    split_args: SplitConfig = field(default_factory=SplitConfig)
    filter_args: FilterConfig = field(default_factory=FilterConfig)
    pacing_args: PacingConfig = field(default_factory=PacingConfig)
    cost_args: CostConfig = field(default_factory=CostConfig)
    comm_args: CommConfig = field(default_factory=CommConfig)
    device_args: DeviceConfig = field(default_factory=DeviceConfig)
    tracking_args: TrackingConfig = field(default_factory=TrackingConfig)
    source: str = ""  # the YAML file this came from

    # Short aliases keep call sites readable: cfg.data.dataset rather than cfg.data_args...
    @property
    def common(self) -> CommonConfig:
        return self.common_args

    @property
    def data(self) -> DataConfig:
        return self.data_args

    @property
    def model(self) -> ModelConfig:
        return self.model_args

    @property
    def train(self) -> TrainConfig:
        return self.train_args

    @property
    def mlm(self) -> MlmConfig:
        return self.mlm_args

    @property
    def prompt(self) -> PromptConfig:
        return self.prompt_args

    @property
    def pseudo(self) -> PseudoConfig:
        return self.pseudo_args

    def for_round(self, round_idx: int, uses_pseudo: bool, bias_only: bool = False) -> "FesConfig":
        """The config a client trains with in `round_idx`: tuning_args.bias_learning_rate when
        only biases train, and the warm-up's own lr and epochs before pseudo_args.start_round
        (methods with pseudo labels); else this one. tuning_args.bias_epochs likewise, and
        adapter_args.learning_rate for the adapter methods (adapter, lora)."""
        p, tu = self.pseudo, self.tuning
        lr = tu.bias_learning_rate if bias_only and tu.bias_learning_rate else self.train.learning_rate
        if self.train.method in ADAPTER_METHODS and self.adapter.learning_rate:
            lr = self.adapter.learning_rate
        epochs = tu.bias_epochs if bias_only and tu.bias_epochs else self.train.epochs
        if uses_pseudo and round_idx < p.start_round:
            lr, epochs = p.warmup_learning_rate or lr, p.warmup_epochs or epochs
        if (lr, epochs) == (self.train.learning_rate, self.train.epochs):
            return self
        return dataclasses.replace(self, train_args=dataclasses.replace(self.train, learning_rate=lr, epochs=epochs))

    @property
    def tuning(self) -> TuningConfig:
        return self.tuning_args

    @property
    def adapter(self) -> AdapterConfig:
        return self.adapter_args

    @property
    def filter(self) -> FilterConfig:
        return self.filter_args

    @property
    def pacing(self) -> PacingConfig:
        return self.pacing_args

    @property
    def cost(self) -> CostConfig:
        return self.cost_args

    @property
    def comm(self) -> CommConfig:
        return self.comm_args

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in _sections()}

    def fingerprint(self, *section_names: str) -> str:
        """Stable hash of the named sections (all when none): keys caches and run names."""
        d = self.to_dict()
        chosen = {k: d[k] for k in (section_names or d.keys())}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]

    def flat_args(self) -> SimpleNamespace:
        """The flattened namespace FedML expects (`args.comm_round`, `args.backend`, ...).

        FedML's own sections come first and win: a FeS section's key of the same name
        (`filter_args.method`) never shadows theirs (`train_args.method`). FeS code reads
        the typed config, never these flat keys."""
        flat: dict[str, Any] = {}
        sections = self.to_dict()
        for name in FEDML_SECTIONS:
            flat.update(sections[name])
        for name, section in sections.items():
            if name not in FEDML_SECTIONS:
                flat.update({k: v for k, v in section.items() if k not in flat})
        flat["random_seed"] = self.common.random_seed
        flat["using_mlops"] = False
        return SimpleNamespace(**flat)

    def resolved_cache_dir(self) -> Path:
        return Path(self.common.cache_dir or os.path.join(self.common.output_dir, "cache"))


# the sections whose keys FedML itself reads from its flat args
FEDML_SECTIONS = ("common_args", "data_args", "model_args", "train_args", "comm_args", "device_args", "tracking_args")


def _sections() -> list[dataclasses.Field]:
    return [f for f in fields(FesConfig) if f.name != "source"]


def _coerce(value: Any, default: Any, where: str) -> Any:
    """Coerce a YAML scalar to the type of the field's default, or fail naming the key."""
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise FesError(f"config key '{where}' must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise FesError(f"config key '{where}' must be an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # YAML reads 1e-3 (no dot) as a string: accept numeric strings
            try:
                return float(value)
            except (TypeError, ValueError):
                raise FesError(f"config key '{where}' must be a number, got {value!r}") from None
        return float(value)
    if kind is dict:
        if not isinstance(value, dict):
            raise FesError(f"config key '{where}' must be a mapping, got {value!r}")
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                raise FesError(f"config key '{where}.{k}' must be a single value, got {v!r}")
        return {str(k): v for k, v in value.items()}
    if kind is str:
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise FesError(f"config key '{where}' must be a string, got {value!r}")
        return str(value)
    return value


def _unknown(name: str, known: list[str], what: str, where: str) -> FesError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
    return FesError(f"unknown {what} '{name}' in {where}{hint}")


def config_from_dict(raw: Mapping[str, Any], source: str = "<dict>") -> FesConfig:
    """Build and validate a config from the YAML's mapping of sections."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise FesError(f"{source}: expected a mapping of sections (common_args, data_args, ...)")
    cfg = FesConfig(source=source)
    given: set[str] = set()
    section_names = [f.name for f in _sections()]
    for sec_name, sec_values in raw.items():
        if sec_name not in section_names:
            raise _unknown(str(sec_name), section_names, "config section", source)
        if sec_values is None:
            continue
        if not isinstance(sec_values, Mapping):
            raise FesError(f"config section '{sec_name}' in {source} must be a mapping of keys")
        section = getattr(cfg, sec_name)
        known = [f.name for f in fields(section)]
        for key, value in sec_values.items():
            if key not in known:
                raise _unknown(str(key), known, "config key", f"{source} section '{sec_name}'")
            where = f"{sec_name}.{key}"
            setattr(section, key, _coerce(value, getattr(section, key), where))
            given.add(where)
    validate(cfg, given)
    return cfg


def add_set_argument(parser: Any, help: str = "override a config key (repeatable)") -> None:
    """The `--set SECTION.KEY=VALUE` option every command shares; `parse_overrides` reads it."""
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help=help)


def parse_overrides(items: "list[str]") -> dict[str, Any]:
    """CLI `--set section.key=value` items as {'section.key': value}; values parse as YAML
    scalars (3 -> int, 1e-3 -> str, coerced later by the field's type)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise FesError(f"--set '{item}' must look like section.key=value")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise FesError(f"--set '{item}': the value is not a YAML scalar") from None
    return out


# Config keys that name input files or folders. A relative value read from a YAML file is
# taken from that file's folder, so a config works whatever the current directory; a relative
# value given on the command line (`--set section.key=value`) is taken from the current
# directory, as a shell user expects. Both are stored absolute (a run's config.yaml stays
# valid wherever it is read). Where a run *writes* (common_args.output_dir and cache_dir) is
# not resolved: `output_dir: runs` puts runs below the directory the command runs in, not
# inside run_configs/. Defaults (comm_args.mpi_host_file: mpi/mpi_host_file, ...) are not read
# from a file either: they mean the current directory (runtime.job.make_run_dir stores them
# absolute against it in the run's config.yaml).
INPUT_PATH_KEYS: dict[str, tuple[str, ...]] = {
    "data_args": ("data_dir", "train_file", "test_file", "classes_file", "fednlp_data_file", "fednlp_partition_file"),
    "model_args": ("mlm_from",),
    "comm_args": ("mpi_host_file", "grpc_ipconfig_path", "tls_ca", "tls_cert", "tls_key"),
    "cost_args": ("device_dir",),
}
# Keys that hold a name or a local path: resolved only when the value looks like a path
# (`./x`, `../x`, `~/x`, or a file or folder of that name next to the config), so HF ids
# (`roberta-large`) and `offline:all-MiniLM-L6-v2` stay as they are.
NAME_OR_PATH_KEYS: dict[str, tuple[str, ...]] = {
    "model_args": ("model",),
    "filter_args": ("proxy_model",),
}
# Lists of profile names or .yaml/.yml paths: only the paths are resolved.
PROFILE_LIST_KEYS: dict[str, tuple[str, ...]] = {"cost_args": ("devices",)}


def _absolute(value: str, base: str) -> str:
    return os.path.abspath(os.path.join(base, os.path.expanduser(value)))


def _looks_local(value: str, base: str) -> bool:
    if value.startswith("offline:"):
        return False
    v = value.replace("\\", "/")
    return (
        v in (".", "..")
        or v.startswith(("./", "../", "~"))
        or os.path.isabs(value)
        or os.path.exists(os.path.join(base, value))
    )


def resolve_path_value(section: str, key: str, value: Any, base: str | os.PathLike) -> Any:
    """`value` of `section.key` with a relative input path made absolute against `base`;
    anything else (other keys, empty values, names such as HF model ids) unchanged."""
    base = os.path.abspath(base)
    if key in INPUT_PATH_KEYS.get(section, ()):
        return _absolute(value, base) if isinstance(value, str) and value else value
    if key in NAME_OR_PATH_KEYS.get(section, ()):
        return _absolute(value, base) if isinstance(value, str) and value and _looks_local(value, base) else value
    if key in PROFILE_LIST_KEYS.get(section, ()):
        items = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value
        if not isinstance(items, list):
            return value
        return [_absolute(x, base) if isinstance(x, str) and Path(x).suffix in (".yaml", ".yml") else x for x in items]
    return value


def resolve_paths(raw: dict[str, Any], base: str | os.PathLike) -> dict[str, Any]:
    """In place, for sections as a YAML file holds them: every relative input path made
    absolute against `base` (the file's folder). Returns `raw`."""
    for sec, values in raw.items():
        if isinstance(values, dict):
            for key in list(values):
                values[key] = resolve_path_value(str(sec), str(key), values[key], base)
    return raw


def resolve_override_paths(overrides: Mapping[str, Any], base: str | os.PathLike | None = None) -> dict[str, Any]:
    """'section.key' overrides with relative input paths made absolute against `base`
    (default: the current directory, for `--set` values)."""
    base = os.getcwd() if base is None else base
    out: dict[str, Any] = {}
    for dotted, value in overrides.items():
        sec, _, key = str(dotted).partition(".")
        out[dotted] = resolve_path_value(sec, key, value, base)
    return out


def read_sections(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The YAML's sections as plain dicts with `section.key` overrides applied: the one place a
    run config file is read (typing and validation: `config_from_dict`).

    Relative input paths (INPUT_PATH_KEYS, and NAME_OR_PATH_KEYS that look like paths) are
    made absolute: the file's own values against the file's folder, `overrides` (the command
    line's --set) against the current directory. common_args.output_dir and cache_dir are
    left as written: relative ones stay relative to the current directory."""
    p = Path(path)
    if not p.is_file():
        raise FesError(f"config file not found: {p} (pass --cf run_configs/<name>.yaml)")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise FesError(f"{p}:{at} is not valid YAML ({getattr(e, 'problem', e)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FesError(f"cannot read config file {p}: {getattr(e, 'strerror', None) or e}") from None
    if raw is None or raw == {}:
        raise FesError(
            f"{p} is empty: a run config names its sections (common_args, data_args, model_args, "
            f"train_args, ...); see run_configs/*.yaml"
        )
    if not isinstance(raw, dict):
        raise FesError(f"{p}: expected a mapping of sections (common_args, data_args, ...)")
    raw = {k: dict(v or {}) if isinstance(v, dict) or v is None else v for k, v in raw.items()}
    resolve_paths(raw, os.path.dirname(os.path.abspath(p)))
    apply_overrides(raw, resolve_override_paths(overrides or {}), str(p))
    return raw


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any], source: str = "<dict>") -> None:
    """Set each 'section.key' of `overrides` in the raw sections, in place (types: config_from_dict;
    paths are taken as given: see `resolve_override_paths`)."""
    for dotted, value in overrides.items():
        sec, dot, key = str(dotted).partition(".")
        if not dot or not key:
            raise FesError(f"override '{dotted}' must look like section.key=value")
        section = raw.setdefault(sec, {})
        if not isinstance(section, dict):
            raise FesError(f"config section '{sec}' in {source} must be a mapping of keys")
        section[key] = value


def load_config(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> FesConfig:
    """Read, type and validate a run config; `overrides` maps 'section.key' to a value (CLI --set).

    Relative input paths in the file (data files and folders, model_args.mlm_from, host and
    ipconfig files, ...: INPUT_PATH_KEYS) resolve against the file's folder, those in
    `overrides` against the current directory; common_args.output_dir stays relative to the
    current directory. A config named by model_args.mlm_from resolves its own paths against
    its own folder when it is loaded."""
    return config_from_dict(read_sections(path, overrides), source=str(path))


RUN_CONFIG_FILE = "config.yaml"  # the config a run folder keeps, input paths absolute


def read_run_sections(run_dir: str | os.PathLike) -> dict[str, Any]:
    """A run folder's saved config.yaml as its raw sections; one error line when it is missing
    or not YAML (the resume check, reports and the benchmarks' skip-finished check read it here)."""
    path = Path(run_dir) / RUN_CONFIG_FILE
    if not path.is_file():
        raise FesError(f"{run_dir} is not a run directory (no {RUN_CONFIG_FILE})")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise FesError(f"{path} is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise FesError(f"{path} holds {type(raw).__name__}, not config sections")
    return raw


def load_run_config(run_dir: str | os.PathLike, drop_unknown: bool = False) -> FesConfig:
    """A run folder's saved config, typed and validated. drop_unknown: keys this version no
    longer knows are dropped, so an older run stays readable for reports."""
    raw = read_run_sections(run_dir)
    if drop_unknown:
        default = FesConfig()
        known = {f.name: {g.name for g in fields(getattr(default, f.name))} for f in _sections()}
        raw = {
            sec: {k: v for k, v in (values or {}).items() if k in known[sec]}
            for sec, values in raw.items()
            if sec in known and isinstance(values, dict)
        }
    return config_from_dict(raw, source=str(Path(run_dir) / RUN_CONFIG_FILE))


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise FesError(message)


DELIMITER_NAMES = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}


def _validate_csv_options(d: DataConfig) -> None:
    """data_args' CSV layout keys (dataset custom): caught here, before any file is opened, so a
    wrong layout is one line naming the key rather than a puzzling row error later."""
    d.delimiter = DELIMITER_NAMES.get(d.delimiter.lower(), d.delimiter) if d.delimiter else ""
    _check(
        len(d.delimiter) <= 1 and d.delimiter not in ('"', "\n", "\r"),
        f"data_args.delimiter must be one character (or {', '.join(DELIMITER_NAMES)}) and not a quote or "
        f"newline, got {d.delimiter!r}",
    )
    _check(d.label_index_base >= 0, f"data_args.label_index_base must be >= 0 (1 or 0), got {d.label_index_base}")
    _check(
        not (d.classes_file and d.classes),
        "set data_args.classes_file or data_args.classes, not both: the file already names the classes in order",
    )
    if d.dataset == "custom" and not d.csv_header:
        for key in ("text_columns", "text_b_columns", "label_column"):
            value = getattr(d, key)
            bad = [c for c in (value if isinstance(value, list) else [value]) if not str(c).isdigit()]
            if bad:
                raise FesError(
                    f"data_args.csv_header is false, so data_args.{key} must be 0-based column "
                    f"numbers (the file has no header naming them), got {bad[0]!r}"
                )


def _validate_numbers(cfg: FesConfig) -> None:
    """Every float key finite (`.inf`, `.nan` or "1e999" fail here, naming the key, not at the
    first aggregation): a non-finite rate, timeout or bound has no meaning anywhere."""
    for sec in _sections():
        section = getattr(cfg, sec.name)
        for f in fields(section):
            value = getattr(section, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise FesError(f"config key '{sec.name}.{f.name}' must be a finite number, got {value}")


LR_SCHEDULES = ("constant", "linear", "cosine")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def validate_mlm(m: MlmConfig) -> None:
    """mlm_args' values (the federated MLM build), one error line each."""
    _check(0 < m.mask_probability < 1, f"mlm_args.mask_probability must be in (0, 1), got {m.mask_probability}")
    _check(m.local_steps >= 1, f"mlm_args.local_steps must be >= 1, got {m.local_steps}")
    _check(
        m.heldout_texts >= 1,
        f"mlm_args.heldout_texts must be >= 1 (test texts for masked-token accuracy), got {m.heldout_texts}",
    )
    _check(
        m.lr_schedule in LR_SCHEDULES,
        f"mlm_args.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got '{m.lr_schedule}'",
    )
    _check(0 <= m.warmup_fraction < 1, f"mlm_args.warmup_fraction must be in [0, 1), got {m.warmup_fraction}")
    _check(
        0 <= m.train_mask_probability < 1,
        f"mlm_args.train_mask_probability must be in [0, 1) (0: mask_probability), got {m.train_mask_probability}",
    )
    _check(m.train_vocab >= 0, f"mlm_args.train_vocab must be >= 0 (0: the whole vocabulary), got {m.train_vocab}")
    _check(
        m.dropout == -1 or 0 <= m.dropout < 1,
        f"mlm_args.dropout must be in [0, 1) or -1 (the model's own), got {m.dropout}",
    )


def validate_adapter(a: AdapterConfig) -> None:
    """adapter_args' values, one error line each; depth against the model's layer count is
    checked when the model is built (tuning.adapters.adapter_plan)."""
    _check(
        a.depth >= -1,
        f"adapter_args.depth must be >= 0 (the first layer with adapters) or -1 (the bottom "
        f"third frozen), got {a.depth}",
    )
    _check(a.width >= 1, f"adapter_args.width must be >= 1 (bottleneck width / LoRA rank), got {a.width}")
    _check(a.alpha > 0, f"adapter_args.alpha must be > 0, got {a.alpha}")
    _check(0 <= a.dropout < 1, f"adapter_args.dropout must be in [0, 1), got {a.dropout}")
    _check(
        a.learning_rate >= 0,
        f"adapter_args.learning_rate must be >= 0 (0: train_args.learning_rate), got {a.learning_rate}",
    )
    _check(
        a.configurator in ("fixed", "progressive"),
        f"adapter_args.configurator must be fixed or progressive, got '{a.configurator}'",
    )
    _check(a.min_depth >= -1, f"adapter_args.min_depth must be >= 0 or -1 (the bottom third frozen), got {a.min_depth}")
    _check(a.max_width >= a.width, f"adapter_args.max_width ({a.max_width}) must be >= adapter_args.width ({a.width})")
    _check(a.trial_rounds >= 1, f"adapter_args.trial_rounds must be >= 1, got {a.trial_rounds}")
    _check(0 < a.trial_share < 1, f"adapter_args.trial_share must be in (0, 1), got {a.trial_share}")


SPLIT_TASKS = ("mlm", "classification")
SPLIT_SCHEDULES = ("parallel", "sequential")


def validate_split(s: SplitConfig) -> None:
    """split_args' values, one error line each; client_layers against the model's depth is
    checked when the model is split (splitfed.parts.split_model)."""
    _check(s.task in SPLIT_TASKS, f"split_args.task must be one of {', '.join(SPLIT_TASKS)}, got '{s.task}'")
    _check(
        s.schedule in SPLIT_SCHEDULES,
        f"split_args.schedule must be one of {', '.join(SPLIT_SCHEDULES)}, got '{s.schedule}'",
    )
    _check(s.client_layers >= 0, f"split_args.client_layers must be >= 0 (0: embeddings only), got {s.client_layers}")
    _check(s.local_steps >= 1, f"split_args.local_steps must be >= 1, got {s.local_steps}")
    _check(
        s.wire_dtype in ("float32", "float16"),
        f"split_args.wire_dtype must be float32 or float16, got '{s.wire_dtype}'",
    )
    _check(s.labels in ("gold", "all"), f"split_args.labels must be gold or all, got '{s.labels}'")


def validate(cfg: FesConfig, given: "set[str] | frozenset[str] | None" = None) -> None:
    """Value checks that the type coercion cannot express. `given`: the 'section.key's the
    config set itself (None: all); a default that does not fit is adjusted, not an error."""
    d, t, c = cfg.data, cfg.train, cfg.common
    _validate_numbers(cfg)
    _check(
        c.training_type in ("simulation", "cross_silo"),
        f"common_args.training_type must be simulation or cross_silo, got '{c.training_type}'",
    )
    _check(c.random_seed >= 0, f"common_args.random_seed must be >= 0, got {c.random_seed}")
    _check(c.torch_threads >= 0, f"common_args.torch_threads must be >= 0 (0 = torch default), got {c.torch_threads}")
    _check(
        c.precision in ("auto", "float32", "bfloat16"),
        f"common_args.precision must be auto, float32 or bfloat16, got '{c.precision}'",
    )
    d.dataset = DATASET_ALIASES.get(d.dataset, d.dataset)
    _check(
        d.dataset in DATASETS,
        f"data_args.dataset '{d.dataset}' is not one of {', '.join(DATASETS)} (also: {', '.join(DATASET_ALIASES)})",
    )
    _check(
        d.partition_method in PARTITIONS,
        f"data_args.partition_method must be one of {', '.join(PARTITIONS)}, got '{d.partition_method}'",
    )
    _check(d.client_num_in_total >= 1, f"data_args.client_num_in_total must be >= 1, got {d.client_num_in_total}")
    _check(d.partition_alpha > 0, f"data_args.partition_alpha must be > 0, got {d.partition_alpha}")
    _check(d.partition_beta > 0, f"data_args.partition_beta must be > 0, got {d.partition_beta}")
    for key in ("text_columns", "text_b_columns", "classes"):  # a YAML list or "a, b"
        value = getattr(d, key)
        value = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value or []
        _check(
            isinstance(value, list) and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in value),
            f"data_args.{key} must be a list of names, got {value!r}",
        )
        setattr(d, key, [str(x) for x in value])
    _check(len(set(d.classes)) == len(d.classes), f"data_args.classes has duplicates: {d.classes}")
    _check(
        d.dataset != "custom" or bool(d.train_file and d.text_columns and d.label_column),
        "dataset custom needs data_args.train_file, text_columns and label_column",
    )
    _validate_csv_options(d)
    _check(
        d.dataset != "fednlp_h5" or bool(d.fednlp_data_file),
        "dataset fednlp_h5 needs data_args.fednlp_data_file (a FedNLP *_data.h5)",
    )
    _check(
        d.partition_method != "fednlp_h5" or (d.dataset == "fednlp_h5" and bool(d.fednlp_partition_file)),
        "partition_method fednlp_h5 needs dataset fednlp_h5 and data_args.fednlp_partition_file",
    )
    _check(
        d.partition_method != "fednlp_h5" or d.max_train_examples == 0,
        "data_args.max_train_examples must be 0 with partition_method fednlp_h5 (the file names every example)",
    )
    for key in ("max_train_examples", "max_test_examples"):
        _check(getattr(d, key) >= 0, f"data_args.{key} must be >= 0 (0: all), got {getattr(d, key)}")
    _check(d.gold_sparsity > 0, f"data_args.gold_sparsity must be > 0, got {d.gold_sparsity}")
    _check(d.gold_labels >= 0, f"data_args.gold_labels must be >= 0, got {d.gold_labels}")
    _check(
        0 <= d.gold_clients <= d.client_num_in_total,
        f"data_args.gold_clients must be between 0 and client_num_in_total ({d.client_num_in_total}), "
        f"got {d.gold_clients}",
    )
    _check(0 < d.test_fraction < 1, f"data_args.test_fraction must be in (0, 1), got {d.test_fraction}")
    _check(t.method in METHODS, f"train_args.method '{t.method}' is not one of {', '.join(METHODS)}")
    _check(
        t.federated_optimizer == "FedAvg",
        f"train_args.federated_optimizer '{t.federated_optimizer}' is not supported (FedAvg)",
    )
    _check(t.comm_round >= 1, f"train_args.comm_round must be >= 1, got {t.comm_round}")
    _check(t.client_num_per_round >= 1, f"train_args.client_num_per_round must be >= 1, got {t.client_num_per_round}")
    if t.client_num_per_round > d.client_num_in_total:
        if given is None or "train_args.client_num_per_round" in given:
            raise FesError(
                f"train_args.client_num_per_round is {t.client_num_per_round}, more than the "
                f"{d.client_num_in_total} clients of data_args.client_num_in_total"
            )
        t.client_num_per_round = d.client_num_in_total  # the default (4) on fewer clients: all of them
    _check(t.epochs >= 1, f"train_args.epochs must be >= 1, got {t.epochs}")
    _check(t.batch_size >= 1, f"train_args.batch_size must be >= 1, got {t.batch_size}")
    _check(t.eval_batch_size >= 1, f"train_args.eval_batch_size must be >= 1, got {t.eval_batch_size}")
    _check(t.learning_rate > 0, f"train_args.learning_rate must be > 0, got {t.learning_rate}")
    _check(t.weight_decay >= 0, f"train_args.weight_decay must be >= 0, got {t.weight_decay}")
    _check(
        t.frequency_of_the_test >= 1, f"train_args.frequency_of_the_test must be >= 1, got {t.frequency_of_the_test}"
    )
    _check(
        t.robust_norm_factor == 0 or t.robust_norm_factor >= 1,
        f"train_args.robust_norm_factor must be 0 (off) or >= 1 (x the median update change), "
        f"got {t.robust_norm_factor}",
    )
    _check(cfg.model.max_seq_length >= 8, f"model_args.max_seq_length must be >= 8, got {cfg.model.max_seq_length}")
    _check(cfg.model.model != "", "model_args.model must name an HF model id or a local path")
    _check(
        not cfg.model.mlm_on_job_data or bool(cfg.model.mlm_from),
        "model_args.mlm_on_job_data needs model_args.mlm_from (the fedbert_mlm recipe to build with)",
    )
    validate_mlm(cfg.mlm)
    validate_adapter(cfg.adapter)
    validate_split(cfg.split_args)
    _check(
        not cfg.tracking_args.enable_wandb,
        "tracking_args.enable_wandb must be false: runs are offline and write only to the run directory",
    )
    level = str(cfg.tracking_args.log_level).upper()
    _check(
        level in LOG_LEVELS,
        f"tracking_args.log_level must be one of {', '.join(LOG_LEVELS)}, got '{cfg.tracking_args.log_level}'",
    )
    cfg.tracking_args.log_level = level
    _check(cfg.device_args.gpu_id >= 0, f"device_args.gpu_id must be >= 0, got {cfg.device_args.gpu_id}")
    _check(
        cfg.model.tuning in ("full", "bias", "plan"),
        f"model_args.tuning must be full, bias or plan, got '{cfg.model.tuning}'",
    )
    tu = cfg.tuning
    _check(
        tu.full_layers >= 0 and tu.bias_layers >= -1,
        "tuning_args.full_layers must be >= 0 and bias_layers >= 0 (or -1: the top third), "
        f"got {tu.full_layers} and {tu.bias_layers}",
    )
    fl = cfg.filter
    _check(
        fl.method in ("vote_k", "random", "none"),
        f"filter_args.method must be vote_k, random or none, got '{fl.method}'",
    )
    _check(fl.rho > 1, f"filter_args.rho must be > 1, got {fl.rho}")
    _check(fl.knn >= 1, f"filter_args.knn must be >= 1, got {fl.knn}")
    _check(0 < fl.knn_pool_share <= 1, f"filter_args.knn_pool_share must be in (0, 1], got {fl.knn_pool_share}")
    _check(
        cfg.pseudo.warmup_learning_rate >= 0 and cfg.pseudo.warmup_epochs >= 0,
        "pseudo_args.warmup_learning_rate and warmup_epochs must be >= 0 (0: as train_args), "
        f"got {cfg.pseudo.warmup_learning_rate} and {cfg.pseudo.warmup_epochs}",
    )
    _check(tu.bias_learning_rate >= 0, f"tuning_args.bias_learning_rate must be >= 0, got {tu.bias_learning_rate}")
    _check(tu.bias_epochs >= 0, f"tuning_args.bias_epochs must be >= 0 (0: train_args.epochs), got {tu.bias_epochs}")
    _check(
        0 <= fl.candidate_fraction <= 1,
        f"filter_args.candidate_fraction must be in [0, 1] (0: the dataset's default), got {fl.candidate_fraction}",
    )
    cfg.prompt.verbalizer = {k: str(v) for k, v in cfg.prompt.verbalizer.items()}  # words, even `yes: 1`
    pa = cfg.pacing
    _check(pa.mode in ("adaptive", "static"), f"pacing_args.mode must be adaptive or static, got '{pa.mode}'")
    _check(
        pa.f >= 1 and pa.n >= 1 and 0 < pa.k <= 100,
        f"pacing_args: f and n must be >= 1, k in (0, 100], got f {pa.f}, n {pa.n}, k {pa.k}",
    )
    for key in ("trial_rounds", "top", "parallel_trials"):
        _check(getattr(pa, key) >= 1, f"pacing_args.{key} must be >= 1, got {getattr(pa, key)}")
    for key in ("infer_latency_s", "train_latency_s", "eta"):
        _check(getattr(pa, key) > 0, f"pacing_args.{key} must be > 0, got {getattr(pa, key)}")
    _check(pa.theta >= 0, f"pacing_args.theta must be >= 0, got {pa.theta}")
    _check(0.0 <= pa.val_holdout < 1.0, f"pacing_args.val_holdout must be in [0, 1), got {pa.val_holdout}")
    _check(
        pa.val_signal in ("accuracy", "log_likelihood"),
        f"pacing_args.val_signal must be accuracy or log_likelihood, got '{pa.val_signal}'",
    )
    _check(pa.val_examples >= 0, f"pacing_args.val_examples must be >= 0 (0: all gold labels), got {pa.val_examples}")
    if pa.grid is not None and not isinstance(pa.grid, list):
        raise FesError(f"pacing_args.grid must be a list of 'f,n,k' strings, got {pa.grid!r}")
    _check(
        pa.grid is None or len(pa.grid) > 0,
        "pacing_args.grid is an empty configuration list: give 'f,n,k' entries or leave it unset",
    )
    from .pseudo.pacing import parse_grid  # one error line for a malformed entry

    parse_grid(pa.grid)
    p = cfg.pseudo
    _check(p.start_round >= 0, f"pseudo_args.start_round must be >= 0, got {p.start_round}")
    for key in ("label_every", "label_clients", "per_pass"):
        _check(getattr(p, key) >= 1, f"pseudo_args.{key} must be >= 1, got {getattr(p, key)}")
    _check(
        0 <= p.confidence_threshold < 1,
        f"pseudo_args.confidence_threshold must be in [0, 1), got {p.confidence_threshold}",
    )
    _check(
        cfg.pacing.train_sampling in ("uniform", "labels"),
        f"pacing_args.train_sampling must be uniform or labels, got '{cfg.pacing.train_sampling}'",
    )
    _check(
        p.class_balance in ("none", "gold", "predicted"),
        f"pseudo_args.class_balance must be none, gold or predicted, got '{p.class_balance}'",
    )
    _check(cfg.prompt.pattern_id >= 0, f"prompt_args.pattern_id must be >= 0, got {cfg.prompt.pattern_id}")
    _check(
        bool(cfg.prompt.pattern) == bool(cfg.prompt.verbalizer),
        "prompt_args.pattern and prompt_args.verbalizer go together: set both or neither",
    )
    if cfg.prompt.pattern:
        from .prompt.pvp import split_pattern  # checks {mask} and {text_a}

        split_pattern(cfg.prompt.pattern)
    _check(cfg.comm.silo_num >= 0, f"comm_args.silo_num must be >= 0, got {cfg.comm.silo_num}")
    for key in ("round_timeout_s", "join_timeout_s", "connect_timeout_s", "worker_timeout_s"):
        _check(getattr(cfg.comm, key) > 0, f"comm_args.{key} must be > 0, got {getattr(cfg.comm, key)}")
    from .cost.settings import validate_cost  # one error line naming the key or the profile

    validate_cost(cfg.cost)

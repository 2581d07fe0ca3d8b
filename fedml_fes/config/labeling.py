"""What a run labels and how: prompt_args (the pattern-verbalizer pair), pseudo_args (the
labeling passes), filter_args (which samples are worth labeling) and pacing_args (how many,
how often), each with its checks.

Three checks belong to the code that reads the value and are imported only when they run
(they import nothing of the config): `prompt.pvp.split_pattern`, `pseudo.labeler.LABELERS`,
`pseudo.pacing.parse_grid`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FesError
from .common import OFFLINE_MINILM, check


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


def validate_prompt(pr: PromptConfig) -> None:
    """prompt_args' values, one error line each; verbalizer words become strings (`yes: 1`)."""
    pr.verbalizer = {k: str(v) for k, v in pr.verbalizer.items()}  # words, even `yes: 1`
    check(pr.pattern_id >= 0, f"prompt_args.pattern_id must be >= 0, got {pr.pattern_id}")
    check(
        bool(pr.pattern) == bool(pr.verbalizer),
        "prompt_args.pattern and prompt_args.verbalizer go together: set both or neither",
    )
    if pr.pattern:
        from ..prompt.pvp import split_pattern  # checks {mask} and {text_a}

        split_pattern(pr.pattern)


@dataclass
class PseudoConfig:
    """Pseudo-labeling passes (the inference runtime) and what they keep."""

    start_round: int = 0  # no labeling pass before this round (warm up on gold labels first)
    label_every: int = 1  # f: a labeling pass every f rounds
    label_clients: int = 5  # n: clients that label per pass
    # FedFSL's static pacing: every labeling client holds this many pseudo labels after each
    # event (a constant, the reference code's 100; relabeled by the current model each time)
    per_pass: int = 100
    # FedFSL's static count as a share of the client's pool instead (0: per_pass). The paper's
    # pools hold ~1,200 texts and keep 100 per pass: 0.083, the most confident twelfth
    per_pass_fraction: float = 0.0
    # how a pass turns the model's probabilities into labels before selection (pseudo/labeler.py):
    # paper: as predicted (the paper's FedFSL / FeS); contextual: divided by the model's own
    # answer to content-free inputs (Zhao et al. 2021), removing its label bias; aligned: the
    # pool's mean prediction scaled to uniform (ReMixMatch's distribution alignment); ensemble:
    # the mean over every built-in pattern of the dataset (PET's ensemble; one inference each);
    # flexmatch: as predicted, but the budget goes to the predictions furthest above their class's
    # FlexMatch threshold (Zhang et al. 2021): classes with few confident answers get labels too;
    # classwise: the budget split evenly over the classes, each filled with the texts most probable
    # for it, hard labels (a class the model never answers still gets its share); agree: only the
    # predictions that the gold labels' nearest class prototype in the Sentence-BERT proxy's space
    # gives too (co-training's second view, pseudo/prototypes.py; gold clients send their class sums once)
    labeler: str = "paper"
    # train on pseudo-labeled texts with each word dropped at this rate (pseudo/augment.py; 0: as
    # labeled). The label comes from the clean text: consistency under a strong augmentation
    augment_word_dropout: float = 0.0
    # each round's trainers drawn in proportion to the labels they hold (gold + pseudo), for every
    # method that pseudo-labels (FeS's curriculum pacing does so under pacing_args.train_sampling).
    # Uniform draws among all label holders leave the few gold clients out of most rounds once
    # many clients hold a handful of pseudo labels: fewer gold-label steps than Prompt-only takes
    sample_by_labels: bool = False
    confidence_threshold: float = 0.0  # keep only predictions at least this confident (0: off)
    skip_if_worse_than_zero_shot: bool = False  # no pass while the model is below zero-shot accuracy
    soft_labels: bool = False  # train on the predicted distribution instead of the argmax
    class_balance: str = "none"  # none | gold | predicted: per-class quotas for kept labels
    # class-balanced loss over a client's pseudo labels (as train_args.balance_gold_classes does
    # for its gold labels): each weighted by n / (classes present x its class's count), so the
    # confident picks keep their labels but a class the model over-picks (TREC-6 seed 0: 63% NUM)
    # does not pull the prior toward it. Off: every pseudo label weighs 1 (the paper's)
    balance_classes: bool = False
    # what one pseudo label weighs against one gold label: in the client's loss, in FedAvg's
    # sample count (gold + weight x pseudo) and in sample_by_labels' draw. 1: the paper's, where
    # pseudo-labeled clients dilute the few gold clients' update or leave them out of a round
    # (the paper's pools: four trainers with 100 pseudo labels each leave a gold client's 64
    # labels 14% of the average; Prompt-only: 100%). Below 1 the gold update keeps its share
    # (FixMatch's lambda_u)
    sample_weight: float = 1.0
    # every gold-label holder trains in every round from start_round on, the round's other places
    # drawn as configured among the rest: as many gold-label steps as Prompt-only takes, with pseudo
    # labels added beside them (FixMatch's labeled batch in every step). Off: the paper's draw
    gold_every_round: bool = False
    # the gold-only warm-up rounds (before start_round) may train harder than the pseudo-label
    # rounds: bias-only plans need many steps on the gold labels, but the same step size on a
    # client's handful of one-sided pseudo labels drags the shared biases to its class
    warmup_learning_rate: float = 0.0  # 0: train_args.learning_rate
    warmup_epochs: int = 0  # 0: train_args.epochs


def validate_pseudo(p: PseudoConfig) -> None:
    """pseudo_args' values, one error line each."""
    check(
        p.warmup_learning_rate >= 0 and p.warmup_epochs >= 0,
        "pseudo_args.warmup_learning_rate and warmup_epochs must be >= 0 (0: as train_args), "
        f"got {p.warmup_learning_rate} and {p.warmup_epochs}",
    )
    check(p.start_round >= 0, f"pseudo_args.start_round must be >= 0, got {p.start_round}")
    for key in ("label_every", "label_clients", "per_pass"):
        check(getattr(p, key) >= 1, f"pseudo_args.{key} must be >= 1, got {getattr(p, key)}")
    check(
        0 <= p.confidence_threshold < 1,
        f"pseudo_args.confidence_threshold must be in [0, 1), got {p.confidence_threshold}",
    )
    check(p.sample_weight > 0, f"pseudo_args.sample_weight must be > 0, got {p.sample_weight}")
    check(0 <= p.per_pass_fraction <= 1, f"pseudo_args.per_pass_fraction must be in [0, 1], got {p.per_pass_fraction}")
    check(
        0 <= p.augment_word_dropout < 1,
        f"pseudo_args.augment_word_dropout must be in [0, 1), got {p.augment_word_dropout}",
    )
    from ..pseudo.labeler import LABELERS

    check(p.labeler in LABELERS, f"pseudo_args.labeler must be one of {', '.join(LABELERS)}, got '{p.labeler}'")
    check(
        p.class_balance in ("none", "gold", "predicted"),
        f"pseudo_args.class_balance must be none, gold or predicted, got '{p.class_balance}'",
    )


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


def validate_filter(fl: FilterConfig) -> None:
    """filter_args' values, one error line each."""
    check(
        fl.method in ("vote_k", "random", "none"),
        f"filter_args.method must be vote_k, random or none, got '{fl.method}'",
    )
    check(fl.rho > 1, f"filter_args.rho must be > 1, got {fl.rho}")
    check(fl.knn >= 1, f"filter_args.knn must be >= 1, got {fl.knn}")
    check(0 < fl.knn_pool_share <= 1, f"filter_args.knn_pool_share must be in (0, 1], got {fl.knn_pool_share}")
    check(
        0 <= fl.candidate_fraction <= 1,
        f"filter_args.candidate_fraction must be in [0, 1] (0: the dataset's default), got {fl.candidate_fraction}",
    )


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
    # what a trial's gain is measured against: previous_model, the global model the round started
    # from (the round's own progress is in every trial's gain, so trials of different rounds rank
    # by their round), or round_model, the model the round gives without the trial's group
    trial_baseline: str = "previous_model"


def validate_pacing(pa: PacingConfig) -> None:
    """pacing_args' values, one error line each; a grid entry is parsed as the pacing will."""
    check(pa.mode in ("adaptive", "static"), f"pacing_args.mode must be adaptive or static, got '{pa.mode}'")
    check(
        pa.f >= 1 and pa.n >= 1 and 0 < pa.k <= 100,
        f"pacing_args: f and n must be >= 1, k in (0, 100], got f {pa.f}, n {pa.n}, k {pa.k}",
    )
    for key in ("trial_rounds", "top", "parallel_trials"):
        check(getattr(pa, key) >= 1, f"pacing_args.{key} must be >= 1, got {getattr(pa, key)}")
    for key in ("infer_latency_s", "train_latency_s", "eta"):
        check(getattr(pa, key) > 0, f"pacing_args.{key} must be > 0, got {getattr(pa, key)}")
    check(pa.theta >= 0, f"pacing_args.theta must be >= 0, got {pa.theta}")
    check(0.0 <= pa.val_holdout < 1.0, f"pacing_args.val_holdout must be in [0, 1), got {pa.val_holdout}")
    check(
        pa.val_signal in ("accuracy", "log_likelihood"),
        f"pacing_args.val_signal must be accuracy or log_likelihood, got '{pa.val_signal}'",
    )
    check(
        pa.trial_baseline in ("previous_model", "round_model"),
        f"pacing_args.trial_baseline must be previous_model or round_model, got '{pa.trial_baseline}'",
    )
    check(pa.val_examples >= 0, f"pacing_args.val_examples must be >= 0 (0: all gold labels), got {pa.val_examples}")
    if pa.grid is not None and not isinstance(pa.grid, list):
        raise FesError(f"pacing_args.grid must be a list of 'f,n,k' strings, got {pa.grid!r}")
    check(
        pa.grid is None or len(pa.grid) > 0,
        "pacing_args.grid is an empty configuration list: give 'f,n,k' entries or leave it unset",
    )
    from ..pseudo.pacing import parse_grid  # one error line for a malformed entry

    parse_grid(pa.grid)
    check(
        pa.train_sampling in ("uniform", "labels"),
        f"pacing_args.train_sampling must be uniform or labels, got '{pa.train_sampling}'",
    )

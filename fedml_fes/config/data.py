"""data_args: which dataset, how it is split across clients, which examples carry gold labels,
and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FesError
from .common import check

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


DELIMITER_NAMES = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}


def _validate_csv_options(d: DataConfig) -> None:
    """data_args' CSV layout keys (dataset custom): caught here, before any file is opened, so a
    wrong layout is one line naming the key rather than a puzzling row error later."""
    d.delimiter = DELIMITER_NAMES.get(d.delimiter.lower(), d.delimiter) if d.delimiter else ""
    check(
        len(d.delimiter) <= 1 and d.delimiter not in ('"', "\n", "\r"),
        f"data_args.delimiter must be one character (or {', '.join(DELIMITER_NAMES)}) and not a quote or "
        f"newline, got {d.delimiter!r}",
    )
    check(d.label_index_base >= 0, f"data_args.label_index_base must be >= 0 (1 or 0), got {d.label_index_base}")
    check(
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


def validate_data(d: DataConfig) -> None:
    """data_args' values, one error line each; normalizes the dataset's alias, the list keys
    (a YAML list or "a, b") and the delimiter's name."""
    d.dataset = DATASET_ALIASES.get(d.dataset, d.dataset)
    check(
        d.dataset in DATASETS,
        f"data_args.dataset '{d.dataset}' is not one of {', '.join(DATASETS)} (also: {', '.join(DATASET_ALIASES)})",
    )
    check(
        d.partition_method in PARTITIONS,
        f"data_args.partition_method must be one of {', '.join(PARTITIONS)}, got '{d.partition_method}'",
    )
    check(d.client_num_in_total >= 1, f"data_args.client_num_in_total must be >= 1, got {d.client_num_in_total}")
    check(d.partition_alpha > 0, f"data_args.partition_alpha must be > 0, got {d.partition_alpha}")
    check(d.partition_beta > 0, f"data_args.partition_beta must be > 0, got {d.partition_beta}")
    for key in ("text_columns", "text_b_columns", "classes"):  # a YAML list or "a, b"
        value = getattr(d, key)
        value = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value or []
        check(
            isinstance(value, list) and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in value),
            f"data_args.{key} must be a list of names, got {value!r}",
        )
        setattr(d, key, [str(x) for x in value])
    check(len(set(d.classes)) == len(d.classes), f"data_args.classes has duplicates: {d.classes}")
    check(
        d.dataset != "custom" or bool(d.train_file and d.text_columns and d.label_column),
        "dataset custom needs data_args.train_file, text_columns and label_column",
    )
    _validate_csv_options(d)
    check(
        d.dataset != "fednlp_h5" or bool(d.fednlp_data_file),
        "dataset fednlp_h5 needs data_args.fednlp_data_file (a FedNLP *_data.h5)",
    )
    check(
        d.partition_method != "fednlp_h5" or (d.dataset == "fednlp_h5" and bool(d.fednlp_partition_file)),
        "partition_method fednlp_h5 needs dataset fednlp_h5 and data_args.fednlp_partition_file",
    )
    check(
        d.partition_method != "fednlp_h5" or d.max_train_examples == 0,
        "data_args.max_train_examples must be 0 with partition_method fednlp_h5 (the file names every example)",
    )
    for key in ("max_train_examples", "max_test_examples"):
        check(getattr(d, key) >= 0, f"data_args.{key} must be >= 0 (0: all), got {getattr(d, key)}")
    check(d.gold_sparsity > 0, f"data_args.gold_sparsity must be > 0, got {d.gold_sparsity}")
    check(d.gold_labels >= 0, f"data_args.gold_labels must be >= 0, got {d.gold_labels}")
    check(
        0 <= d.gold_clients <= d.client_num_in_total,
        f"data_args.gold_clients must be between 0 and client_num_in_total ({d.client_num_in_total}), "
        f"got {d.gold_clients}",
    )
    check(0 < d.test_fraction < 1, f"data_args.test_fraction must be in (0, 1), got {d.test_fraction}")

"""Which reader serves `data_args.dataset`, and how its train/test splits are formed.

Datasets with an official test split use it (AG News, Yelp, Yahoo, MNLI dev_matched, SNLI,
FedNLP h5, a user's test_file, an HF test split). The others (BBC News, TREC, movie sentiment, a user's
single file) get a seeded stratified `test_fraction` split with seed 0: the split is a
property of the dataset, not of the run, so every seed is scored on the same test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import FesConfig
from ..errors import FesError
from .custom import ColumnMapping, read_custom
from .readers import LabeledTexts, read_agnews, read_bbc_news, read_yahoo_answers, read_yelp_full, stratified_split


@dataclass(frozen=True)
class Splits:
    train: LabeledTexts
    test: LabeledTexts
    # The ids external partition files use for the rows (FedNLP h5 indices); None when
    # rows are only known by position.
    train_ids: tuple[int, ...] | None = None
    test_ids: tuple[int, ...] | None = None


def _needs_dir(cfg: FesConfig, what: str) -> str:
    if not cfg.data.data_dir:
        raise FesError(f"data_args.data_dir must point at the {what} folder")
    return cfg.data.data_dir


def _official(reader: Callable[[str, str], LabeledTexts], what: str) -> Callable[[FesConfig], Splits]:
    def load(cfg: FesConfig) -> Splits:
        d = _needs_dir(cfg, what)
        return Splits(reader(d, "train"), reader(d, "test"))

    return load


def _split_once(full: LabeledTexts, fraction: float) -> Splits:
    rest, picked = stratified_split(full, fraction, seed=0)
    return Splits(full.subset(rest), full.subset(picked))


def _bbc(cfg: FesConfig) -> Splits:
    return _split_once(read_bbc_news(), cfg.data.test_fraction)


def _trec(cfg: FesConfig) -> Splits:
    from .packaged import read_trec

    return _split_once(read_trec(), cfg.data.test_fraction)


def _movie_sentiment(cfg: FesConfig) -> Splits:
    from .packaged import read_movie_sentiment

    return _split_once(read_movie_sentiment(), cfg.data.test_fraction)


def _mnli(cfg: FesConfig) -> Splits:
    from .nli import read_mnli

    d = _needs_dir(cfg, "MNLI (GLUE MNLI/: train.tsv, dev_matched.tsv)")
    return Splits(read_mnli(d, "train"), read_mnli(d, "test"))


def _snli(cfg: FesConfig) -> Splits:
    from .nli import read_snli

    return Splits(read_snli(cfg.data.data_dir, "train"), read_snli(cfg.data.data_dir, "test"))


def _custom(cfg: FesConfig) -> Splits:
    d = cfg.data
    train, test = read_custom(d.train_file, d.test_file, ColumnMapping.from_config(d))
    return Splits(train, test) if test is not None else _split_once(train, d.test_fraction)


def _hf(cfg: FesConfig) -> Splits:
    from .hf import read_hf

    d = cfg.data
    mapping = ColumnMapping.from_config(d, default_text=("text",), default_label="label")
    train, test = read_hf(
        d.hf_dataset,
        d.hf_config,
        (d.hf_train_split, d.hf_test_split),
        mapping,
        cfg.resolved_cache_dir() / "hf_datasets",
    )
    return Splits(train, test) if test is not None else _split_once(train, d.test_fraction)


def _fednlp(cfg: FesConfig) -> Splits:
    from .fednlp_h5 import read_fednlp_data

    data = read_fednlp_data(cfg.data.fednlp_data_file)
    return Splits(data.train, data.test, data.train_ids, data.test_ids)


SOURCES: dict[str, Callable[[FesConfig], Splits]] = {
    "bbc_news": _bbc,
    "agnews": _official(read_agnews, "AG News (train.csv, test.csv, classes.txt)"),
    "yelp_review_full": _official(read_yelp_full, "Yelp Review Full (yelp_review_full_csv: train.csv, test.csv)"),
    "yahoo_answers": _official(read_yahoo_answers, "Yahoo Answers (yahoo_answers_csv: train.csv, test.csv)"),
    "mnli": _mnli,
    "snli": _snli,
    "trec": _trec,
    "movie_sentiment": _movie_sentiment,
    "custom": _custom,
    "hf": _hf,
    "fednlp_h5": _fednlp,
}


def _subsample(
    split: LabeledTexts, ids: tuple[int, ...] | None, limit: int, seed: int
) -> tuple[LabeledTexts, tuple[int, ...] | None]:
    if limit <= 0 or limit >= len(split):
        return split, ids
    _, picked = stratified_split(split, limit / len(split), seed)
    return split.subset(picked), None if ids is None else tuple(ids[i] for i in picked)


def load_source(cfg: FesConfig) -> Splits:
    """(train, test[, train ids]) for the configured dataset, subsampled as configured."""
    d = cfg.data
    if d.dataset not in SOURCES:
        raise FesError(f"unknown dataset '{d.dataset}' (known: {', '.join(SOURCES)})")
    splits = SOURCES[d.dataset](cfg)
    seed = cfg.common.random_seed
    train, train_ids = _subsample(splits.train, splits.train_ids, d.max_train_examples, seed)
    test, test_ids = _subsample(splits.test, splits.test_ids, d.max_test_examples, seed)
    if train.classes != test.classes:
        raise FesError(f"dataset {d.dataset}: train and test splits name different classes")
    if train.is_pair != test.is_pair:
        raise FesError(f"dataset {d.dataset}: train and test splits differ in having a second text")
    return Splits(train, test, train_ids, test_ids)

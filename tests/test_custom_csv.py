"""dataset: custom from YAML alone: CSV layouts (header or not, delimiter, classes.txt ids), the
one-line errors a user's file can cause, and run_configs/data_custom_example.yaml's dry run."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from fedml_fes.config import config_from_dict, load_config
from fedml_fes.data.custom import ColumnMapping, read_custom
from fedml_fes.data.federated import load_splits
from fedml_fes.errors import FesError
from fedml_fes.runtime.preview import preview_run

from .conftest import REPO

EXAMPLE = REPO / "run_configs" / "data_custom_example.yaml"
CLASSES = ("negative", "neutral", "positive")


def _custom(tmp_path, **data_args) -> dict:
    """A custom-dataset config whose train/test files live in tmp_path."""
    d = {
        "dataset": "custom",
        "train_file": str(tmp_path / "train.csv"),
        "test_file": str(tmp_path / "test.csv"),
        "client_num_in_total": 2,
        "gold_labels": 2,
    }
    d.update(data_args)
    return {"data_args": d}


def _splits(tmp_path, **data_args):
    return load_splits(config_from_dict(_custom(tmp_path, **data_args)))


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


# ---------- layouts ----------


def test_header_row_columns_by_name(tmp_path):
    _write(
        tmp_path / "train.csv", 'id,title,body,label\n1,Good,"fast, quiet",positive\n2,Bad,"loud\nand slow",negative\n'
    )
    _write(tmp_path / "test.csv", "id,title,body,label\n3,Fine,ok,positive\n")
    train, test = _splits(tmp_path, text_columns=["title", "body"], label_column="label")
    assert train.texts == ("Good fast, quiet", "Bad loud and slow")
    assert train.classes == ("negative", "positive") and list(train.labels) == [1, 0] and list(test.labels) == [1]


def test_no_header_columns_by_index(tmp_path):
    # the official AG News layout: no header, the class id first, every field quoted
    _write(tmp_path / "train.csv", '"2","Title one","Body one"\n"1","Title two","Body, two"\n')
    _write(tmp_path / "test.csv", '"1","T","B"\n')
    train, test = _splits(tmp_path, csv_header=False, text_columns=[1, 2], label_column=0)
    assert train.texts == ("Title one Body one", "Title two Body, two")  # column 0 is not text
    assert train.classes == ("1", "2") and list(train.labels) == [1, 0] and list(test.labels) == [0]
    # digit strings are column numbers too (the YAML `"1, 2"` form)
    train, _ = _splits(tmp_path, csv_header=False, text_columns="2", label_column="0")
    assert train.texts == ("Body one", "Body, two")


def test_header_row_is_data_when_csv_header_is_false(tmp_path):
    p = _write(tmp_path / "train.csv", "text,label\nhello,pos\n")
    train, _ = read_custom(str(p), "", ColumnMapping(("0",), "1", header=False))
    assert train.texts == ("text", "hello") and train.classes == ("label", "pos")


def test_no_header_needs_column_numbers_and_consistent_rows(tmp_path):
    with pytest.raises(
        FesError,
        match=r"csv_header is false, so data_args.text_columns must be 0-based column "
        r"numbers .* got 'title'",
    ):
        config_from_dict(_custom(tmp_path, csv_header=False, text_columns=["title"], label_column=0))
    with pytest.raises(FesError, match=r"data_args.label_column must be 0-based column numbers .* got 'label'"):
        config_from_dict(_custom(tmp_path, csv_header=False, text_columns=[1], label_column="label"))
    _write(tmp_path / "train.csv", "1,a,b\n2,c\n")
    with pytest.raises(FesError, match=r"train.csv row 2: expected 3 columns like row 1, got 2"):
        _splits(tmp_path, csv_header=False, text_columns=[1], label_column=0)
    _write(tmp_path / "train.csv", "1,a\n")
    with pytest.raises(FesError, match=r"train.csv row 1: no column\(s\) '5'"):
        _splits(tmp_path, csv_header=False, text_columns=[5], label_column=0)


def test_no_header_is_for_csv_files(tmp_path):
    _write(tmp_path / "train.jsonl", '{"0": "x", "1": "y"}\n')
    with pytest.raises(FesError, match=r"csv_header: false is for .csv/.tsv files; .*train.jsonl is JSON lines"):
        _splits(
            tmp_path,
            train_file=str(tmp_path / "train.jsonl"),
            test_file="",
            csv_header=False,
            text_columns=[0],
            label_column=1,
        )


@pytest.mark.parametrize("given, char", [(";", ";"), ("tab", "\t"), ("\\t", "\t"), ("\t", "\t"), ("pipe", "|")])
def test_delimiter(tmp_path, given, char):
    _write(tmp_path / "train.csv", f"text{char}label\nhello, world{char}pos\nbye{char}neg\n")
    cfg = config_from_dict(
        _custom(tmp_path, test_file="", delimiter=given, text_columns=["text"], label_column="label", test_fraction=0.5)
    )
    assert cfg.data.delimiter == char
    train, test = load_splits(cfg)
    assert sorted(train.texts + test.texts) == ["bye", "hello, world"]  # the comma is no delimiter here


def test_bad_delimiter_is_one_line():
    with pytest.raises(FesError, match=r"data_args.delimiter must be one character"):
        config_from_dict({"data_args": {"delimiter": ";;"}})
    with pytest.raises(FesError, match=r"data_args.delimiter must be one character"):
        config_from_dict({"data_args": {"delimiter": '"'}})


# ---------- classes.txt ----------


def _ids_data(tmp_path, train_ids, test_ids=("1",)):
    _write(tmp_path / "classes.txt", "negative\nneutral\npositive\n\n")  # a trailing blank line is fine
    _write(tmp_path / "train.csv", "".join(f'"{i}","text {n}"\n' for n, i in enumerate(train_ids)))
    _write(tmp_path / "test.csv", "".join(f'"{i}","test {n}"\n' for n, i in enumerate(test_ids)))
    return dict(csv_header=False, text_columns=[1], label_column=0, classes_file=str(tmp_path / "classes.txt"))


def test_classes_file_maps_one_based_ids_to_names(tmp_path):
    train, test = _splits(tmp_path, **_ids_data(tmp_path, ["3", "1", "3"], ["2"]))
    assert train.classes == CLASSES  # the file's order, even with "neutral" absent from train
    assert [train.classes[i] for i in train.labels] == ["positive", "negative", "positive"]
    assert [test.classes[i] for i in test.labels] == ["neutral"]


def test_classes_file_with_zero_based_ids(tmp_path):
    train, _ = _splits(tmp_path, label_index_base=0, **_ids_data(tmp_path, ["0", "2", "1"]))
    assert [train.classes[i] for i in train.labels] == ["negative", "positive", "neutral"]
    with pytest.raises(
        FesError,
        match=r"train.csv row 1: class id '3' is outside 0..2, the 3 classes of "
        r".*classes.txt \(data_args.label_index_base: 0\)",
    ):
        _splits(tmp_path, label_index_base=0, **_ids_data(tmp_path, ["3"]))


@pytest.mark.parametrize(
    "train_ids, test_ids, match",
    [
        (["1", "0"], ["1"], r"train.csv row 2: class id '0' is outside 1..3, the 3 classes of .*classes.txt"),
        (["1", "4"], ["1"], r"train.csv row 2: class id '4' is outside 1..3"),
        (
            ["1", "2"],
            ["1", "neutral"],
            r"test.csv row 2: label 'neutral' is not a class id 1..3 of "
            r"data_args.classes_file .*classes.txt",
        ),
    ],
)
def test_classes_file_bad_ids_name_file_row_and_value(tmp_path, train_ids, test_ids, match):
    with pytest.raises(FesError, match=match):
        _splits(tmp_path, **_ids_data(tmp_path, train_ids, test_ids))


def test_classes_file_problems(tmp_path):
    kw = _ids_data(tmp_path, ["1"])
    with pytest.raises(FesError, match="set data_args.classes_file or data_args.classes, not both"):
        config_from_dict(_custom(tmp_path, classes=list(CLASSES), **kw))
    with pytest.raises(FesError, match=r"data_args.classes_file: file not found: .*nope.txt"):
        _splits(tmp_path, **{**kw, "classes_file": str(tmp_path / "nope.txt")})
    _write(tmp_path / "classes.txt", "negative\n\npositive\n")
    with pytest.raises(FesError, match=r"classes.txt line 2: empty class name"):
        _splits(tmp_path, **kw)
    _write(tmp_path / "classes.txt", "negative\npositive\nnegative\n")
    with pytest.raises(FesError, match=r"classes.txt line 3: class 'negative' repeats line 1"):
        _splits(tmp_path, **kw)
    with pytest.raises(FesError, match=r"data_args.label_index_base must be >= 0"):
        config_from_dict(_custom(tmp_path, label_index_base=-1, **kw))


# ---------- broken files: one line naming the file and the line ----------


def _read(path, classes=()):
    return read_custom(str(path), "", ColumnMapping(("text",), "label", classes=classes))


def test_unterminated_quote_names_the_line_where_it_opened(tmp_path):
    # a legitimate two-line field first, so rows and lines differ; the open quote is on line 5
    p = _write(tmp_path / "train.csv", 'text,label\n"two\nlines",pos\nok,neg\n"never closed,pos\nx,neg\ny,pos\n')
    with pytest.raises(FesError) as e:
        _read(p)
    msg = str(e.value)
    assert msg.startswith(f"{p} line 5: unterminated quote") and "read on to line 7" in msg and "\n" not in msg


def test_unterminated_quote_later_in_a_record(tmp_path):
    # the record starts on line 2, its second field's quote opens on line 3
    p = _write(tmp_path / "train.csv", 'text,label\n"a\nb","pos\nmore,neg\n')
    with pytest.raises(FesError, match=rf"^{re.escape(str(p))} line 3: unterminated quote"):
        _read(p)


def test_missing_closing_quote_that_a_later_quote_closes(tmp_path):
    # the quote of line 3 is closed by the one opening line 5: strict reading catches the swallow
    p = _write(tmp_path / "train.csv", 'text,label\nfine,pos\n"oops,neg\nswallowed,pos\n"next",neg\n')
    with pytest.raises(
        FesError,
        match=rf"^{re.escape(str(p))} line 3: a quoted field opens on this line and runs "
        r"on to line 5, .*is its closing quote missing on line 3\?",
    ):
        _read(p)


def test_stray_quote_after_a_closed_field(tmp_path):
    p = _write(tmp_path / "train.csv", 'text,label\nfine,pos\n"say "hi"",neg\n')
    with pytest.raises(FesError, match=rf"^{re.escape(str(p))} line 3: malformed CSV \(',' expected after '\"'\)"):
        _read(p)


def test_unknown_label_names_file_row_line_and_label(tmp_path):
    p = _write(tmp_path / "train.csv", "text,label\none,pos\nok,zzz\n")
    with pytest.raises(FesError, match=rf"^{re.escape(str(p))} row 3: label 'zzz' is not in data_args.classes"):
        _read(p, classes=("neg", "pos"))
    p = _write(tmp_path / "train.csv", 'text,label\n"two\nlines",pos\nok,zzz\n')
    with pytest.raises(
        FesError,
        match=rf"^{re.escape(str(p))} row 3 \(line 4\): label 'zzz' is not in "
        r"data_args.classes \(neg, pos\)",
    ):
        _read(p, classes=("neg", "pos"))


# ---------- the PVP and the example config ----------


def _example_data(tmp_path) -> dict:
    """Files for run_configs/data_custom_example.yaml in tmp_path, and the overrides that point at
    them and shrink the job to a tiny model and a few clients."""
    texts = {"negative": "broke after a day", "neutral": "does the job", "positive": "quiet and fast"}
    rows = [(f"Item {i}", f"{texts[c]}, take {i}", c) for i in range(10) for c in CLASSES]
    _write(tmp_path / "train.csv", "title,body,label\n" + "".join(f'{t},"{b}",{c}\n' for t, b, c in rows))
    _write(tmp_path / "test.csv", "title,body,label\n" + "".join(f'{t},"{b}",{c}\n' for t, b, c in rows[:9]))
    return {
        "data_args.train_file": str(tmp_path / "train.csv"),
        "data_args.test_file": str(tmp_path / "test.csv"),
        "data_args.client_num_in_total": 3,
        "data_args.gold_labels": 6,
        "train_args.client_num_per_round": 2,
        "common_args.output_dir": str(tmp_path / "runs"),
    }


def _example(tmp_path, tiny_model_dir, **overrides):
    cf = shutil.copy(EXAMPLE, tmp_path / "example.yaml")
    model = {
        "model_args.model": tiny_model_dir,
        "model_args.mlm_from": "",
        "model_args.mlm_on_job_data": False,
        "model_args.max_seq_length": 32,
    }
    return load_config(cf, {**_example_data(tmp_path), **model, **overrides})


@pytest.mark.parametrize("method", ["fes", "prompt_only"])
def test_example_config_dry_run(tmp_path, tiny_model_dir, method):
    cfg = _example(tmp_path, tiny_model_dir, **{"train_args.method": method})
    assert cfg.prompt.pattern == "{text_a} All in all, it was {mask}"  # the example's own PVP
    lines = preview_run(cfg)
    text = "\n".join(lines)
    assert "data: custom, 30 training texts, 9 test, 3 classes (negative, neutral, positive)" in text
    assert (
        "prompt: '{text_a} All in all, it was {mask}', verbalizer negative -> bad, neutral -> okay, "
        "positive -> good" in text
    )
    assert f"method: {method}," in text and not (tmp_path / "runs").exists()


def test_dry_run_counts_training_gold_labels_per_class_and_names_a_missing_class(tmp_path, tiny_model_dir):
    cfg = _example(tmp_path, tiny_model_dir, **{"train_args.method": "prompt_only", "data_args.gold_labels": 1})
    line = next(x for x in preview_run(cfg) if x.startswith("gold labels per class, for training: "))
    counts = dict(re.findall(r"(negative|neutral|positive) (\d+)", line.split(" (")[0]))
    assert sorted(counts) == list(CLASSES) and sorted(counts.values()) == ["0", "0", "1"]
    missing = [c for c in CLASSES if counts[c] == "0"]
    assert line.endswith(f"(no training label for {', '.join(missing)}: only the MLM's prior can predict it)")


def _documented_variant() -> dict:
    """The no-header + classes.txt keys the example's comments document, as overrides."""
    lines = EXAMPLE.read_text().split("Replace the column keys below with:")[1].split("and drop")[0]
    keys = yaml.safe_load("\n".join(re.sub(r"^#\s*", "", x) for x in lines.splitlines() if x.strip("# ")))
    assert set(keys) == {"csv_header", "text_columns", "label_column", "classes_file", "label_index_base"}
    return {f"data_args.{k}": v for k, v in keys.items()}


def test_example_config_no_header_variant_dry_run(tmp_path, tiny_model_dir):
    variant = _documented_variant()
    _write(tmp_path / "classes.txt", "\n".join(CLASSES) + "\n")
    train = _write(tmp_path / "ids_train.csv", "".join(f'"{i % 3 + 1}","Item {i}","text {i}"\n' for i in range(30)))
    test = _write(tmp_path / "ids_test.csv", '"3","A","b"\n"1","C","d"\n"2","E","f"\n')
    variant.update(
        {
            "data_args.classes": [],
            "data_args.classes_file": str(tmp_path / "classes.txt"),
            "data_args.train_file": str(train),
            "data_args.test_file": str(test),
        }
    )
    cfg = _example(tmp_path, tiny_model_dir, **variant)
    assert (cfg.data.csv_header, cfg.data.text_columns, cfg.data.label_column) == (False, ["1", "2"], "0")
    text = "\n".join(preview_run(cfg))
    assert "30 training texts, 3 test, 3 classes (negative, neutral, positive)" in text
    assert "verbalizer negative -> bad, neutral -> okay, positive -> good" in text


def test_verbalizer_missing_a_class_fails_before_any_model_loads(tmp_path, tiny_model_dir, monkeypatch):
    cfg = _example(tmp_path, tiny_model_dir, **{"prompt_args.verbalizer": {"negative": "bad", "positive": "good"}})
    with pytest.raises(
        FesError,
        match=r"^verbalizer does not cover classes \['neutral'\] "
        r"\(it maps \['negative', 'positive'\]\)$",
    ):
        preview_run(cfg)
    # a real run's model build checks the verbalizer before it reads any weights
    from fedml_fes.data.federated import build_federated_data
    from fedml_fes.models import load_tokenizer
    from fedml_fes.runtime import methods

    def no_weights(*args, **kwargs):
        raise AssertionError("model weights were loaded before the verbalizer was checked")

    monkeypatch.setattr(methods, "build_prompt_lm", no_weights)  # the prompt model's only weight loader
    data, _ = build_federated_data(cfg)
    with pytest.raises(FesError, match=r"does not cover classes \['neutral'\]"):
        methods.get_method("fes").build_model(cfg, data.classes, load_tokenizer(cfg.model.model), weights=True)


def test_the_example_trains_as_the_fidelity_benchmarks_shared_config():
    """A user who starts from the example gets the measured config, not one of its own: every key
    outside the data, the PVP and evaluation-only settings equals run_configs/fidelity.yaml's."""
    from fedml_fes_plugins.bench.fidelity import DATASET_FILE_KEYS

    example, shared = load_config(EXAMPLE).to_dict(), load_config(REPO / "run_configs" / "fidelity.yaml").to_dict()
    own = {f"{s}.{k}" for s, keys in DATASET_FILE_KEYS.items() for k in keys}
    evaluation = {
        "train_args.method",
        "train_args.frequency_of_the_test",
        "data_args.max_test_examples",
        "common_args.torch_threads",
        "common_args.output_dir",
    }
    differ = [
        f"{s}.{k}"
        for s in shared
        if s != "cost_args"
        for k in shared[s]
        if f"{s}.{k}" not in own | evaluation and example[s][k] != shared[s][k]
    ]
    assert differ == []

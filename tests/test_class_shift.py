import json
import math

import pytest

from fedml_fes.errors import FesError
from fedml_fes.report.class_shift import class_shift, skew_correlation

from .conftest import load_benchmark_script


def _run(tmp_path, before, after, gold=(43, 7, 2), test=(10, 10, 10), name="prompt_only-s10"):
    run = tmp_path / name
    run.mkdir(parents=True)
    classes = ["sport", "politics", "tech"]
    summary = {
        "status": "completed",
        "final": 0.5,
        "initial": {"test_acc": 0.6},
        "initial_test": {"classes": classes, "confusion": before},
        "test": {"classes": classes, "confusion": after},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "gold_classes.json").write_text(json.dumps({"classes": classes, "counts": list(gold)}))
    (run / "test_classes.json").write_text(json.dumps({"classes": classes, "counts": list(test)}))
    return run


def test_a_model_pulled_toward_the_gold_majority_shows_as_skew_following_predictions(tmp_path):
    before = [[8, 1, 1], [1, 8, 1], [1, 1, 8]]  # balanced, 80% right
    after = [[10, 0, 0], [4, 6, 0], [6, 0, 4]]  # now says "sport" for half the test texts
    rows = class_shift(_run(tmp_path, before, after))
    sport, _politics, tech = rows
    assert sport.gold_share == pytest.approx(43 / 52) and sport.test_share == pytest.approx(1 / 3)
    assert sport.predicted_before == pytest.approx(1 / 3) and sport.predicted_after == pytest.approx(20 / 30)
    assert sport.acc_before == pytest.approx(0.8) and sport.acc_after == pytest.approx(1.0)
    assert tech.acc_after == pytest.approx(0.4) and tech.moved < 0 < sport.moved
    assert skew_correlation(rows) > 0.9 and skew_correlation(rows, "moved") > 0.9


def test_no_movement_or_too_few_classes_has_no_correlation(tmp_path):
    same = [[8, 1, 1], [1, 8, 1], [1, 1, 8]]
    assert math.isnan(skew_correlation(class_shift(_run(tmp_path, same, same))))


def test_an_older_run_without_the_untrained_confusion_is_one_error_line(tmp_path):
    run = _run(tmp_path, [[1]], [[1]])
    s = json.loads((run / "summary.json").read_text())
    del s["initial_test"]
    (run / "summary.json").write_text(json.dumps(s))
    with pytest.raises(FesError, match="no initial_test"):
        class_shift(run)


def test_the_script_refuses_reported_seeds_and_writes_its_table(tmp_path):
    main = load_benchmark_script("gold_skew").main
    same = [[8, 1, 1], [1, 8, 1], [1, 1, 8]]
    _run(tmp_path / "ok" / "bbc_news" / "runs", same, [[10, 0, 0], [4, 6, 0], [6, 0, 4]])
    out = tmp_path / "skew.md"
    assert main([str(tmp_path / "ok"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| sport | 83 | 33 | 33 -> 67 | 80 -> 100 |" in text and "Correlation over its 3 classes" in text
    assert "excess predicted share (predicted % after - test %): +" in text
    _run(tmp_path / "reported" / "bbc_news" / "runs", same, same, name="prompt_only-s0")
    assert main([str(tmp_path / "reported")]) == 1


def test_pseudo_labels_drawn_from_the_known_classes_show_in_the_class_mix(tmp_path, capsys):
    """class_mix and benchmarks/pseudo_class_mix.py: a FedFSL run whose pseudo labels are all
    'sport' against Prompt-only of the same seed."""
    from fedml_fes.report.class_shift import class_mix

    root = tmp_path / "fid"
    runs = root / "trec" / "runs"
    _run(runs, [[8, 1, 1]] * 3, [[8, 1, 1], [1, 8, 1], [1, 1, 8]], name="prompt_only-s0")
    fedfsl = _run(runs, [[8, 1, 1]] * 3, [[10, 0, 0], [5, 5, 0], [6, 0, 4]], name="fedfsl-s0")
    for client, labels in (("3", [0, 0, 0]), ("7", [0, 1])):
        (fedfsl / "clients" / client).mkdir(parents=True)
        (fedfsl / "clients" / client / "pseudo_labels.json").write_text(json.dumps({"labels": labels}))
    mix = class_mix(fedfsl)
    assert mix.pseudo_share.tolist() == pytest.approx([0.8, 0.2, 0.0])
    assert mix.predicted.tolist() == pytest.approx([0.7, 0.1667, 0.1333], abs=1e-3)
    assert class_mix(runs / "prompt_only-s0").pseudo_share is None
    script = load_benchmark_script("pseudo_class_mix")
    out = tmp_path / "mix.md"
    assert script.main([str(root), "--datasets", "trec", "--out", str(out)]) == 0
    text = out.read_text()
    assert "**trec fedfsl seed 0**: accuracy 63.3, Prompt-only 80.0" in text
    assert "| sport | 33 | 80 | 70 / 33 | 100 / 80 |" in text
    assert script.main([str(tmp_path / "nothing")]) == 1
    assert "no finished pseudo-label run" in capsys.readouterr().err


def test_prototype_view_scores_kept_pseudo_labels_on_tuning_seeds_only(tmp_path, tiny_model_dir, capsys):
    """benchmarks/prototype_view.py: the Sentence-BERT view's test accuracy and the kept pseudo
    labels split by its agreement, each part's share right against the evaluator's truth; a
    reported seed (< 10) is refused in one line."""
    from fedml_fes.config import config_from_dict
    from fedml_fes.runtime.job import federated_data_for

    from .conftest import small_config, write_config

    script = load_benchmark_script("prototype_view")
    run = tmp_path / "fedfsl-s10"
    raw = small_config(tmp_path, tiny_model_dir, common_args={"random_seed": 10})
    run.mkdir()
    write_config(run / "config.yaml", raw)
    data, oracle = federated_data_for(config_from_dict(raw))
    client = next(c for c in data.clients if len(c.unlabeled) >= 4)
    ids = list(client.unlabeled.example_ids[:4])
    truth = oracle.labels_of(ids)
    labels = truth[:3] + [(truth[3] + 1) % len(data.classes)]  # three right, one wrong
    (run / "clients" / str(client.client_id)).mkdir(parents=True)
    (run / "clients" / str(client.client_id) / "pseudo_labels.json").write_text(
        json.dumps({"example_ids": ids, "labels": labels})
    )
    row = script.view_row(run)
    assert row["kept"] == 4 and 0 <= row["agree"] <= 4 and row["all_right"] == pytest.approx(0.75)
    right = row["agree_right"] * row["agree"] + row["other_right"] * (4 - row["agree"])
    assert right == pytest.approx(3)
    assert 0 <= row["prototype_acc"] <= 1 and 0 <= row["knn_acc"] <= 1
    out = tmp_path / "view.md"
    assert script.main([str(run), "--out", str(out)]) == 0 and "| 4 |" in out.read_text()
    write_config(run / "config.yaml", {**raw, "common_args": {**raw["common_args"], "random_seed": 0}})
    assert script.main([str(run)]) == 1
    assert "seed 0: this diagnosis reads tuning seeds (>= 10) only" in capsys.readouterr().err

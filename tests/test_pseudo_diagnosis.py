"""benchmarks/pseudo_diagnosis.py: the oracle variant relabels with the truth; the calibration
table counts what a threshold keeps and how much of it is right."""

from __future__ import annotations

import json

import yaml

from fedml_fes.pseudo.store import PseudoLabels

from .conftest import load_benchmark_script, small_config


def test_the_oracle_variant_replaces_the_kept_labels_by_the_truth(monkeypatch):
    from fedml_fes.data import federated
    from fedml_fes.runtime import methods

    diag = load_benchmark_script("pseudo_diagnosis")
    chosen = PseudoLabels(example_ids=[3, 7], labels=[0, 0], probs=[[0.9, 0.1], [0.6, 0.4]], passes=1)
    # registered first, so the test's teardown restores both whatever the script sets
    monkeypatch.setattr(methods.FewShot, "label", lambda self, *a, **k: (chosen, 5))
    monkeypatch.setattr(federated.LabelOracle, "__init__", federated.LabelOracle.__init__)
    diag.use_true_labels()
    federated.LabelOracle({3: 1, 7: 0, 9: 1})
    pseudo, inferred = methods.FewShot.label(None)
    assert (pseudo.example_ids, pseudo.labels, pseudo.probs, pseudo.passes, inferred) == ([3, 7], [1, 0], [], 1, 5)


def test_calibration_counts_kept_labels_and_their_accuracy(tmp_path, tiny_model_dir, capsys):
    from fedml_fes.config import config_from_dict
    from fedml_fes.data.federated import build_federated_data

    diag = load_benchmark_script("pseudo_diagnosis")
    raw = small_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    data, oracle = build_federated_data(config_from_dict(raw))
    ids = list(data.clients[0].unlabeled.example_ids[:4])
    truth = oracle.labels_of(ids)
    other = [(t + 1) % len(data.classes) for t in truth]

    def onehot_ish(label, conf):
        row = [(1 - conf) / (len(data.classes) - 1)] * len(data.classes)
        row[label] = conf
        return row

    # right at 0.95 and 0.75, wrong at 0.85 and 0.6
    labels = [truth[0], other[1], truth[2], other[3]]
    probs = [
        onehot_ish(labels[0], 0.95),
        onehot_ish(labels[1], 0.85),
        onehot_ish(labels[2], 0.75),
        onehot_ish(labels[3], 0.6),
    ]
    store = run / "clients" / "0"
    store.mkdir(parents=True)
    (store / "pseudo_labels.json").write_text(
        json.dumps({"example_ids": ids, "labels": labels, "probs": probs, "passes": 1})
    )
    passes = diag.last_pass(run)
    rows = {t: (n, acc) for t, n, acc in diag.calibration(passes)}
    assert rows[0.0] == (4, 0.5) and rows[0.7] == (3, 2 / 3) and rows[0.8] == (2, 0.5) and rows[0.9] == (1, 1.0)
    assert rows[0.99][0] == 0
    counts = diag.confusion(passes, 0.8)  # kept: truth[0] as itself, truth[1] as other[1]
    assert counts.sum() == 2 and counts[truth[0], truth[0]] == 1 and counts[truth[1], other[1]] == 1
    assert diag.main(["--calibration", str(run)]) == 0
    assert "| 0.90 | 1 | 25% | 1.000 |" in capsys.readouterr().out
    (store / "pseudo_labels.json").write_text(
        json.dumps({"example_ids": ids, "labels": labels, "probs": [], "passes": 1})
    )
    assert diag.main(["--calibration", str(run)]) == 1
    assert "holds no probabilities" in capsys.readouterr().err


def test_reported_seeds_are_refused(capsys):
    diag = load_benchmark_script("pseudo_diagnosis")
    assert diag.main(["--variant", "hard", "--seeds", "0"]) == 1
    assert "seeds >= 10" in capsys.readouterr().err

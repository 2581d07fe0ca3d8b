"""benchmarks/pacing_choices.py: AUG-E's trials and choices read back from a run's events.log."""

import pytest

from .conftest import load_benchmark_script

EVENTS = """\
16:23:25 round 2: pacing trial <f=1, n=2, k=1%> on idle clients [48, 78]
16:25:45 round 2: pacing trial <f=1, n=2, k=1%> done: delta_acc=-0.0112 AUG-E=-0.00559757
16:25:45 round 2: pacing trial <f=1, n=4, k=4%> done: delta_acc=-0.0021 AUG-E=-0.000351305
16:27:59 round 3: pacing trial <f=5, n=4, k=1%> done: delta_acc=+0.0162 AUG-E=0.011571
16:27:59 round 3: pacing chose <f=5, n=4, k=1%>; top 2: <f=5, n=4, k=1%> <f=1, n=4, k=4%>
16:30:00 round 6: pacing re-trial chose (was <f=5, n=4, k=1%>) <f=1, n=4, k=4%>; top 2: <f=1, n=4, k=4%>
"""


def _run(tmp_path):
    run = tmp_path / "res" / "trec" / "runs" / "fes-s10"
    run.mkdir(parents=True)
    (run / "events.log").write_text(EVENTS)
    (run / "metrics.csv").write_text(
        "round,test_acc,pseudo_total,label_clients\n0,,0,\n1,0.5,0,\n2,,2,5 16\n3,0.75,7,52 93\n"
    )
    return run


def test_trials_spreads_and_choices_are_read_from_the_events(tmp_path):
    script = load_benchmark_script("pacing_choices")
    m = script.measure(_run(tmp_path))
    assert m["trials"] == 3 and m["rounds"] == 2
    assert m["within"] == pytest.approx(0.0091)  # round 2: -0.0021 - (-0.0112)
    assert m["between"] == pytest.approx(0.0162 - (-0.0112 - 0.0021) / 2)
    assert m["chosen"] == ["<f=5, n=4, k=1%>", "<f=1, n=4, k=4%>"]
    assert m["events"] == 2 and m["pseudo"] == 7 and m["acc"] == pytest.approx(0.75)


def test_the_table_and_a_missing_folder(tmp_path, capsys):
    script = load_benchmark_script("pacing_choices")
    _run(tmp_path)
    out = tmp_path / "pacing.md"
    assert script.main([str(tmp_path / "res"), "--out", str(out)]) == 0
    row = next(x for x in out.read_text().splitlines() if x.startswith("| res trec fes-s10 |"))
    assert "| 3 (2) | 0.0091 |" in row and "<f=5, n=4, k=1%> then <f=1, n=4, k=4%>" in row and row.endswith("| 75.0 |")
    capsys.readouterr()
    assert script.main([str(tmp_path / "nowhere")]) == 1
    assert "no such folder" in capsys.readouterr().err

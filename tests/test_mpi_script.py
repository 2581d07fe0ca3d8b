"""mpi/run_fes_mpi.sh is POSIX sh: it parses and reports bad arguments under sh, dash and bash
(no mpirun is started here; tests/test_mpi.py runs it for real, marked slow)."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "mpi" / "run_fes_mpi.sh"
SHELLS = [
    pytest.param(
        argv, marks=pytest.mark.skipif(shutil.which(argv[0]) is None, reason=f"no {argv[0]}"), id=" ".join(argv)
    )
    for argv in (["sh"], ["dash"], ["bash"], ["bash", "--posix"])
]


def _run(shell, *args):
    return subprocess.run([*shell, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("shell", SHELLS)
def test_script_parses(shell):
    out = subprocess.run([*shell, "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "args, message",
    [
        ((), "usage: "),
        (("3",), "usage: "),
        (("three", "c.yaml"), "NUM_PROCESSES must be a number"),
    ],
)
def test_bad_arguments_print_one_line_and_exit_2(shell, args, message):
    out = _run(shell, *args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "pipefail" not in out.stderr and "not found" not in out.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_reaches_fedml_fes_which_rejects_a_missing_config_before_mpirun(shell, tmp_path):
    out = _run(shell, "2", str(tmp_path / "nope.yaml"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        f"fedml-fes: error: config file not found: {tmp_path / 'nope.yaml'} (pass --cf run_configs/<name>.yaml)"
    ]

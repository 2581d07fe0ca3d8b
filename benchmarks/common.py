"""Shared by the benchmark scripts: run one (method, seed) resumably, read its files back."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedml_fes.config import FesConfig, load_config  # noqa: E402


def run_one(
    cf: str, run_dir: Path, overrides: dict[str, Any], adjust: Callable[[FesConfig], None] | None = None, tag: str = ""
) -> dict:
    """Run in-process unless `run_dir` already holds a completed run (resumable)."""
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    summary_path = run_dir / "summary.json"
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("status") == "completed":
        return json.loads(summary_path.read_text())
    cfg = load_config(cf, {"common_args.output_dir": str(run_dir.parent.parent), **overrides})
    if adjust is not None:
        adjust(cfg)
    return run_in_process(
        cfg, make_run_dir(cfg, str(run_dir)), progress=False, echo=lambda line: print(f"  [{tag}] {line}", flush=True)
    )


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / "metrics.csv").open()))


def read_summary(run_dir: Path) -> dict:
    p = run_dir / "summary.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def floats(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "", "nan")]


def print_and_write_table(script: str, title: str, text: str, out: str | None, argv: list[str] | None) -> None:
    """Print a diagnosis's markdown `text`; with `out`, also write it under `title` with the
    command that made it (this script and its arguments as given)."""
    print(text)
    if out:
        cmd = f"benchmarks/{script} " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(out).write_text(f"# {title}\n\nMade by `{cmd}`.\n\n{text}\n")

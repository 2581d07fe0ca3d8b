"""Rewrite result files so that they record no path of the machine that made them.

    .venv/bin/python benchmarks/portable_results.py benchmarks/results/fidelity_runs   # after copying run folders in
    .venv/bin/python benchmarks/portable_results.py --check benchmarks/results docs   # list, change nothing
    .venv/bin/python benchmarks/portable_results.py --data /path/to/datasets runs/fidelity   # <data>/agnews -> yours

Every absolute path in the text files below the given folders becomes what it names from the
checkout's root (`/elsewhere/runs/fidelity` -> `runs/fidelity`, `/elsewhere/mpi/mpi_host_file`
-> `mpi/mpi_host_file`) or, outside any checkout, `<data>/<its name>`
(`fedml_fes_plugins.bench.paths`). A run folder rewritten this way still rebuilds its report
(`benchmarks/fidelity.py --report-only`). `--data DIR` goes back for one machine: `<data>/x`
becomes DIR/x, so that run folders copied out of the results count as finished for a command
given DIR/x (`--agnews-dir DIR/agnews`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedml_fes_plugins.bench.paths import DATA, local_text, machine_paths, portable_text

SUFFIXES = (".json", ".yaml", ".yml", ".md", ".csv", ".txt")


def text_files(folders: list[str]) -> list[Path]:
    found = []
    for folder in map(Path, folders):
        found += [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", help="result folders or files")
    p.add_argument("--check", action="store_true", help="list the machine paths found; rewrite nothing")
    p.add_argument("--data", metavar="DIR", help=f"instead: write {DATA}/x as DIR/x (run folders to resume here)")
    opts = p.parse_args(argv)
    if opts.data:
        for path in text_files(opts.folders):
            text = path.read_text()
            if f"{DATA}/" in text:
                path.write_text(local_text(text, opts.data))
                print(f"{path}: {DATA} is {opts.data}")
        return 0
    found = 0
    for path in text_files(opts.folders):
        text = path.read_text()
        paths = machine_paths(text)
        if not paths:
            continue
        found += len(paths)
        if opts.check:
            print(f"{path}: {', '.join(sorted(set(paths)))}")
        else:
            path.write_text(portable_text(text))
            print(f"{path}: {len(paths)} path(s) rewritten")
    return 1 if opts.check and found else 0


if __name__ == "__main__":
    sys.exit(main())

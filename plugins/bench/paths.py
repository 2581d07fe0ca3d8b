"""Paths as a result records them: from the checkout's root, never the machine's.

A result (`benchmarks/results/`, `docs/`) says how to reproduce it from any checkout, so it
names the project's files and run folders from the checkout's root (`run_configs/x.yaml`,
`runs/fidelity`) and what lies outside the checkout by a placeholder (`<data>/agnews`).
System paths (`/etc/mosquitto/`) and placeholders (`/path/to/`) stay as written.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

# the project's folders a config names (run_configs/x.yaml, mpi/mpi_host_file, deploy/...)
CHECKOUT_FOLDERS = ("run_configs", "mpi", "deploy", "benchmarks")
RUN_FOLDERS = ("runs",)  # where runs write, below the checkout's root
DATA = "<data>"  # what lies outside the checkout: a data folder the command's user supplies
SYSTEM = ("/etc/", "/usr/", "/bin/", "/dev/", "/proc/", "/sys/", "/srv/", "/path/to/")
# an absolute path of two or more parts, not inside a URL, a relative path or a placeholder
ABSOLUTE = re.compile(r"(?<![\w.~<>:/-])/[\w.@+-]+(?:/[\w.@+-]+)+/?")


def in_checkout(value: Any) -> Any:
    """A project file's path as it reads inside any checkout: runs made from another clone or
    worktree (an absolute `/elsewhere/run_configs/x.yaml`) name the same file as
    `run_configs/x.yaml`; anything else unchanged."""
    if isinstance(value, str) and value.startswith("/"):
        parts = Path(value).parts
        for i, part in enumerate(parts):
            if part in CHECKOUT_FOLDERS:
                return "/".join(parts[i:])
    return value


def portable_path(value: str, root: str | os.PathLike | None = None) -> str:
    """`value` as a result records it: below `root` (default: the current directory, the
    checkout a benchmark runs from) relative to it; a project or run folder of another
    checkout from that folder on (`/elsewhere/runs/x` -> `runs/x`); any other absolute path
    as `<data>/<its name>`. Relative paths, system paths and placeholders are unchanged."""
    if not value.startswith("/") or value.startswith(SYSTEM):
        return value
    path = Path(value)
    base = Path(os.getcwd() if root is None else root).resolve()
    if path == base or base in path.parents:
        return path.relative_to(base).as_posix() or "."
    parts = path.parts
    for i, part in enumerate(parts):
        if part in CHECKOUT_FOLDERS + RUN_FOLDERS:
            return "/".join(parts[i:])
    return f"{DATA}/{path.name}"


def portable_command(command: str, root: str | os.PathLike | None = None) -> str:
    """A command line with every absolute path argument (`--out /x/runs/f`, `key=/x/y`) made
    portable, to paste in any checkout."""
    words = []
    for word in shlex.split(command):
        key, eq, value = word.partition("=")
        if word.startswith("/"):
            word = portable_path(word, root)
        elif eq and value.startswith("/"):
            word = key + eq + portable_path(value, root)
        words.append(word)
    return shlex.join(words)


def machine_paths(text: str) -> list[str]:
    """The absolute paths in a text that name a place on one machine (system paths and
    placeholders are not)."""
    return [m.group(0) for m in ABSOLUTE.finditer(text) if not m.group(0).startswith(SYSTEM)]


def portable_text(text: str, root: str | os.PathLike | None = None) -> str:
    """A result file's text with every machine path made portable (`benchmarks/portable_results.py`)."""
    return ABSOLUTE.sub(lambda m: portable_path(m.group(0), root), text)


def local_text(text: str, data: str | os.PathLike) -> str:
    """The reverse for one machine: `<data>/x` as `data`/x, so that run folders copied out of
    the results resume under a command given that machine's data folders."""
    return text.replace(f"{DATA}/", f"{Path(data).resolve().as_posix()}/")

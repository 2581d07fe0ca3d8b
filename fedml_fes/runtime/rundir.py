"""Where a run writes: checked before anything is created, and locked while the run is live.

`check_run_paths` runs before a run loads anything: an output folder under a regular file,
a read-only folder or a run directory another live run holds is one error line, and nothing
is created. `lock_run_dir` takes an exclusive `flock` on `<run_dir>/.lock` for the rest of
the process's life, so a second run pointed at the same directory is refused instead of
interleaving its rows into the first one's metrics.csv. The kernel drops the lock when its
process ends, however it ends: a `.lock` left by a dead run never blocks the next one.

A launcher that holds a run directory's lock for the processes it starts (the cross-silo
launcher's server process writes into the launcher's folder) names the folder in their
environment (`inherited_lock_env`); a process whose run directory is named there does not
lock it again, since its parent holds it for as long as it lives.

`make_run_dir` names and creates a run's folder and stores its config there.

No torch here: these checks answer in a fraction of a second, and a launcher that only starts
other processes (mpirun's, the cross-silo one's) never imports it.
"""

from __future__ import annotations

import os
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import IO

import yaml

from ..config import FesConfig, resolve_paths
from ..errors import FesError

try:
    import fcntl
except ImportError:  # not on POSIX: runs are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"
INHERITED_LOCK_ENV = "FES_RUN_DIR_LOCKED"  # the run directory the starting process holds locked
_held: dict[str, IO[str]] = {}  # real path -> the open lock file this process holds


def _absolute(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


def check_writable_dir(path: str | os.PathLike, what: str) -> None:
    """`path` is a folder this process can write in, or can be created as one; else one line
    naming `what` (the config key or flag) and the path. Creates nothing."""
    p = _absolute(path)
    if os.path.lexists(p):
        if not os.path.isdir(p):
            raise FesError(f"{what} {path} is a file, not a folder")
        if not os.access(p, os.W_OK | os.X_OK):
            raise FesError(f"{what} {path} is not writable")
        return
    parent = os.path.dirname(p)
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FesError(f"{what} {path} cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FesError(f"{what} {path} cannot be created: {parent} is not writable")


def _in_use(path: str | os.PathLike, holder: str) -> FesError:
    return FesError(
        f"run directory {path} is in use by another live run ({holder or 'another process'}): "
        f"wait for it to end or pass another --run-dir"
    )


def _holder(f: IO[str]) -> str:
    try:
        f.seek(0)
        return f.read().strip()
    except OSError:
        return ""


def inherited_lock_env(path: str | os.PathLike) -> dict[str, str]:
    """Environment for processes started by the holder of `path`'s lock: they write there
    under that lock instead of taking their own (which the holder's would refuse)."""
    return {INHERITED_LOCK_ENV: os.path.realpath(_absolute(path))}


def _held_here(real: str) -> bool:
    """This process, or the launcher that started it, holds the lock of `real`."""
    return real in _held or os.environ.get(INHERITED_LOCK_ENV) == real


def check_not_locked(path: str | os.PathLike) -> None:
    """Fail if a live process holds `path`'s run lock (a stale `.lock` passes); takes nothing."""
    lock = os.path.join(_absolute(path), LOCK_FILE)
    if fcntl is None or _held_here(os.path.realpath(_absolute(path))) or not os.path.isfile(lock):
        return
    try:
        f = open(lock)
    except OSError:
        return  # unreadable: lock_run_dir decides
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(path, _holder(f)) from None
        except OSError:
            return  # no locks on this file system
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def lock_run_dir(path: str | os.PathLike) -> None:
    """Hold `<path>/.lock` exclusively until this process ends (again in the same process: a
    no-op); another live holder is one error line. File systems without locks run unlocked."""
    real = os.path.realpath(_absolute(path))
    if fcntl is None or _held_here(real):
        return
    try:
        f = open(os.path.join(real, LOCK_FILE), "a+")
    except OSError as e:
        raise FesError(f"cannot write in run directory {path}: {e.strerror or e}") from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(f)
        f.close()
        raise _in_use(path, holder) from None
    except OSError:  # e.g. ENOLCK on some network file systems
        f.close()
        return
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    f.flush()
    _held[real] = f


def release_run_dir(path: str | os.PathLike) -> None:
    """Give the lock back before the process ends (tests; a process running runs one by one)."""
    f = _held.pop(os.path.realpath(_absolute(path)), None)
    if f is not None:
        f.close()  # closing the last descriptor drops the flock


def needs_cache_dir(cfg: FesConfig) -> bool:
    """Whether the run writes into common_args.cache_dir (the federated MLM build does)."""
    return bool(cfg.model.mlm_from) or cfg.train.method == "fedbert_mlm"


def check_run_paths(cfg: FesConfig, run_dir: str | os.PathLike | None = None) -> None:
    """Everything a run will write, checked before anything is created: the run directory
    (`run_dir`, else a new folder below common_args.output_dir) and, for MLM builds,
    common_args.cache_dir. One error line naming the flag or key."""
    if run_dir:
        check_writable_dir(run_dir, "--run-dir")
        check_not_locked(run_dir)
    else:
        check_writable_dir(cfg.common.output_dir, "common_args.output_dir")
        if cfg.common.run_name:
            named = Path(cfg.common.output_dir) / cfg.common.run_name
            check_writable_dir(named, "common_args.run_name")
            check_not_locked(named)
    if needs_cache_dir(cfg):
        cache = cfg.resolved_cache_dir()
        check_writable_dir(cache, "common_args.cache_dir" if cfg.common.cache_dir else "the cache folder")


# ---- naming and creating a run directory ---------------------------------------------------

# file stems that say nothing about the data: the run is named after the folder instead
_GENERIC_STEMS = {
    "train",
    "training",
    "trainset",
    "train_set",
    "train_data",
    "data",
    "dataset",
    "datasets",
    "data_files",
    "all",
    "full",
    "input",
    "inputs",
    "raw",
    "examples",
    "labeled",
    "corpus",
    "text",
    "texts",
    "file",
    "files",
    "partition_files",
}
_DATA_SUFFIXES = {".csv", ".tsv", ".jsonl", ".json", ".txt", ".h5", ".hdf5", ".gz", ".bz2", ".xz", ".zip"}


def _sanitize(name: str) -> str:
    """A run-folder-safe name: [A-Za-z0-9_.-] only, no leading dot (hidden) or separator."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-")[:64].rstrip("._-")


def _name_of_file(path: str, drop: str) -> str:
    """The data a file holds, by name: its stem without data suffixes and without `drop`
    (`_train` of reviews_train.csv, `_data` of FedNLP's agnews_data.h5); a generic stem
    (train.csv, data.jsonl) gives its folder's name instead."""
    p = Path(path)
    stem = p.name
    while Path(stem).suffix.lower() in _DATA_SUFFIXES:
        stem = stem[: -len(Path(stem).suffix)]
    stripped = re.sub(drop, "", stem, flags=re.IGNORECASE)
    stem = stripped or stem
    candidates = [stem] + [parent.name for parent in list(p.parents)[:2]]
    for name in candidates:
        clean = _sanitize(name)
        if clean and clean.lower() not in _GENERIC_STEMS:
            return clean
    return ""


def dataset_label(cfg: FesConfig) -> str:
    """What a run's folder calls its data: the built-in dataset's name, or for data the user
    points at (dataset custom, fednlp_h5, hf) the name of that file, folder or HF dataset."""
    d = cfg.data
    name = ""
    if d.dataset == "custom" and d.train_file:
        name = _name_of_file(d.train_file, r"[_.-](train|training)$")
    elif d.dataset == "fednlp_h5" and d.fednlp_data_file:
        name = _name_of_file(d.fednlp_data_file, r"[_.-]data$")
    elif d.dataset == "hf" and d.hf_dataset:
        name = _sanitize("-".join(x for x in (d.hf_dataset.replace("/", "_"), d.hf_config) if x))
    return name or _sanitize(d.dataset) or "data"


def default_run_name(cfg: FesConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (
        f"{cfg.train.method}-{dataset_label(cfg)}-s{cfg.common.random_seed}-{stamp}-{int(time.time() * 1e3) % 1000:03d}"
    )


def make_run_dir(cfg: FesConfig, run_dir: str | None = None, lock: bool = False) -> Path:
    """Create the run directory and store the resolved config in it: input paths absolute (a
    config file's were resolved when it was read; relative ones left, such as defaults, mean the
    current directory), so the stored config names the same files wherever it is read.

    `lock`: hold `<run_dir>/.lock` for the rest of this process (the process that owns the run),
    taken before config.yaml is written: a second run into a live run's directory is refused
    with one line and changes nothing there (`rundir.lock_run_dir`)."""
    path = Path(run_dir) if run_dir else Path(cfg.common.output_dir) / (cfg.common.run_name or default_run_name(cfg))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FesError(f"run directory {path} is a file, not a folder") from None
    except OSError as e:
        raise FesError(f"cannot create run directory {path}: {e.strerror or e}") from None
    if lock:
        lock_run_dir(path)
    try:
        (path / "config.yaml").write_text(yaml.safe_dump(resolve_paths(cfg.to_dict(), Path.cwd()), sort_keys=False))
    except OSError as e:
        raise FesError(f"cannot write in run directory {path}: {e.strerror or e}") from None
    return path

"""A run's checkpoint: what `--resume` continues from, saved by the server after every round.

In the run directory, after round r has been recorded (and before round r+1 is planned):

- `checkpoint.pt`: the round done, the `RoundServer` state (global trainable tensors,
  pseudo-label counts, labeling events and budget, the pacing configurator, validation and
  test scores), the recorder's rows and events, the sizes of the run's append-only files
  (metrics.csv, events.log, client_costs.csv) at that moment, and the config's result keys.
  Plain data and tensors only: it loads with `torch.load(weights_only=True)`.
- `checkpoint_clients/round-<r>/`: a snapshot of the client folders (`clients/<id>/`:
  pseudo labels, a pacing trial's labels, activation caches, proxy embeddings, filter
  rankings), made of hard links.

Why a snapshot of the client folders: a labeling phase rewrites a client's pseudo labels
before its round ends, and the next pass reads them (`previous`), so a run killed between a
labeling phase and the round's end holds labels newer than the checkpoint; restoring the
folders as they were makes the redone round read what the uninterrupted run read. Per-round
files in the store would need the round in every client-side read and write; the snapshot
needs nothing from the clients and costs one hard link per file, because every writer in a
client folder replaces its file (temp file + rename) instead of rewriting it in place, so a
linked inode never changes under the snapshot. Caches are snapshotted too: they are
deterministic, but their hit counts and the proxy's one-time embedding cost go into
client_costs.csv, which then also matches the uninterrupted run. The server can snapshot
what its processes share a file system with: the in-process runtime and mpirun (whose ranks
already share `clients/`, since any rank may play any client). Cross-silo silos keep their
folders on their own machines and snapshot them themselves (`snapshot_clients` at the first
message of each round: the end of the round before); a server that starts tells each silo
the round it continues after, and the silo restores that snapshot (`restore_clients`), or
empties its folders for a fresh run.

Atomic: the snapshot folder is complete before a temp file holding the state is fsynced and
renamed to `checkpoint.pt` (which names the snapshot); older snapshots are removed after. A
kill at any point leaves the previous checkpoint whole. On resume, the append-only files are
cut back to their checkpointed sizes (a round recorded after the checkpoint, or the events
of a round that was abandoned, are dropped and redone), `clients/` is made equal to the
snapshot, and the server continues with the next round. Every draw in the round logic is
seeded per (seed, round, client), so the resumed run ends with the uninterrupted run's
metrics (tested by killing runs with SIGKILL).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

from ..config import RUN_CONFIG_FILE, FesConfig, load_run_config, resolve_paths
from ..errors import FesError, one_line

CHECKPOINT_FILE = "checkpoint.pt"
SNAPSHOT_DIR = "checkpoint_clients"
CLIENTS_DIR = "clients"
# the run's append-only records: cut back to their checkpointed sizes on resume
TRACKED_FILES = ("metrics.csv", "events.log", "client_costs.csv")
VERSION = 1
# a checkpoint write that fails with less than this free is put down to a full disk
LOW_DISK_BYTES = 64 * 2**20

# keys that change where a run writes, how its processes talk, or what a step holds in memory,
# never its results (gradient checkpointing: the same weights bit for bit, tests/test_causal_lm.py)
NON_RESULT_KEYS: dict[str, set[str] | None] = {
    "common_args": {"run_name", "output_dir", "cache_dir", "training_type"},
    "comm_args": None,  # None: the whole section
    "tracking_args": None,
    "train_args": {"gradient_checkpointing", "checkpoint_bias_only"},
}


def is_result_key(section: str, key: str) -> bool:
    """Whether `section.key` can change a run's results (NON_RESULT_KEYS says which cannot)."""
    skip = NON_RESULT_KEYS.get(section, set())
    return skip is not None and key not in skip


def result_config(cfg: FesConfig) -> dict[str, dict[str, Any]]:
    """The config's keys that change results, input paths absolute (as config.yaml stores them)."""
    sections = resolve_paths(cfg.to_dict(), Path.cwd())
    out = {}
    for name, values in sections.items():
        if NON_RESULT_KEYS.get(name, set()) is not None:
            out[name] = {k: v for k, v in values.items() if is_result_key(name, k)}
    return out


def config_differences(stored: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """`section.key (stored -> current)` for every result key whose value differs. A key the
    stored config lacks (saved by a version before the key existed) counts as its default."""
    defaults = FesConfig().to_dict()
    diffs = []
    for name in sorted(set(stored) | set(current)):
        a, b = stored.get(name, {}), current.get(name, {})
        for key in sorted(set(a) | set(b)):
            if key not in a and b.get(key) == defaults.get(name, {}).get(key):
                continue
            if a.get(key) != b.get(key):
                diffs.append(f"{name}.{key} ({a.get(key)!r} there, {b.get(key)!r} here)")
    return diffs


def config_mismatch(run_dir: Path, diffs: list[str], against: str) -> FesError:
    """The one error line for a resume whose config differs from the run's (first three keys)."""
    shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
    return FesError(
        f"cannot resume {run_dir}: the config differs from {against} in {shown}; resume with the "
        f"run's own config and --set values"
    )


def check_resume(cfg: FesConfig, run_dir: str | os.PathLike | None) -> dict[str, Any]:
    """Before anything is written: the run in `run_dir` can be continued with `cfg`. Returns
    {"round": last finished round, "num_rounds": ..., "completed": whether summary.json says
    the run completed}; one error line otherwise (no --run-dir, no checkpoint, a config that
    differs from the checkpointed run's config.yaml in a key that changes results)."""
    if not run_dir:
        raise FesError("--resume needs --run-dir: the run directory of the run to continue")
    d = Path(run_dir)
    if not (d / CHECKPOINT_FILE).is_file():
        what = "does not exist" if not d.exists() else f"holds no {CHECKPOINT_FILE} (a run saves one after each round)"
        raise FesError(f"nothing to resume: run directory {run_dir} {what}")
    stored_path = d / RUN_CONFIG_FILE
    if stored_path.is_file():
        try:
            stored = result_config(load_run_config(d))
        except FesError as e:
            raise FesError(f"cannot resume {run_dir}: its config.yaml does not load: {e}") from None
        diffs = config_differences(stored, result_config(cfg))
        if diffs:
            raise config_mismatch(d, diffs, f"{stored_path}")
    meta = load_checkpoint(d)
    diffs = config_differences(meta["config"], result_config(cfg))
    if diffs:
        raise config_mismatch(d, diffs, f"the checkpointed run's ({d / CHECKPOINT_FILE})")
    completed = meta["round"] >= meta["num_rounds"] - 1 and _summary_status(d) == "completed"
    return {"round": meta["round"], "num_rounds": meta["num_rounds"], "completed": completed}


def _summary_status(run_dir: Path) -> str | None:
    import json

    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def load_checkpoint(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        raise FesError(f"nothing to resume: run directory {run_dir} holds no {CHECKPOINT_FILE}")
    import torch  # here, not at the top: a launcher checks a run folder without torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated or foreign file: say which, in one line
        raise FesError(f"cannot read {path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not isinstance(state, dict) or state.get("version") != VERSION:
        raise FesError(f"{path} is not a checkpoint this fedml-fes version writes")
    return state


def _client_files(root: Path) -> dict[Path, Path]:
    """Relative path -> path of every finished file below `root` (temp files left out)."""
    if not root.is_dir():
        return {}
    return {p.relative_to(root): p for p in sorted(root.rglob("*")) if p.is_file() and ".tmp" not in p.name}


def _place(src: Path, dst: Path) -> None:
    """`dst` becomes `src`'s content: a hard link (a copy where links fail), replaced atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:  # no hard links here (another file system, FAT, ...): copy
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _snapshot_name(round_idx: int) -> str:
    return f"{SNAPSHOT_DIR}/round-{round_idx:05d}"


def _prune_snapshots(run_dir: Path, keep: str) -> None:
    root = run_dir / SNAPSHOT_DIR
    if root.is_dir():
        for d in root.iterdir():
            if d != run_dir / keep:
                shutil.rmtree(d, ignore_errors=True)


def snapshot_clients(run_dir: str | os.PathLike, round_idx: int) -> str:
    """Hard-link `clients/` into the snapshot of `round_idx` (replacing a cut-short one); its name."""
    run_dir = Path(run_dir)
    snap = _snapshot_name(round_idx)
    snap_dir = run_dir / snap
    if snap_dir.exists():  # a save of this round that was cut short
        shutil.rmtree(snap_dir)
    for rel, src in _client_files(run_dir / CLIENTS_DIR).items():
        _place(src, snap_dir / rel)
    snap_dir.mkdir(parents=True, exist_ok=True)
    return snap


def save_checkpoint(run_dir: str | os.PathLike, round_idx: int, state: dict[str, Any]) -> None:
    """The state after `round_idx`, with a snapshot of the client folders (see the module doc)."""
    import torch

    run_dir = Path(run_dir)
    tmp = run_dir / f".{CHECKPOINT_FILE}.tmp{os.getpid()}"
    try:
        snap = snapshot_clients(run_dir, round_idx)
        files = {n: (run_dir / n).stat().st_size if (run_dir / n).is_file() else None for n in TRACKED_FILES}
        full = {**state, "version": VERSION, "round": round_idx, "snapshot": snap, "files": files}
        with open(tmp, "wb") as f:
            torch.save(full, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # a full disk inside torch.save reads "unexpected pos N vs M"
        tmp.unlink(missing_ok=True)
        raise FesError(_cannot_save(run_dir, round_idx, e)) from e
    os.replace(tmp, run_dir / CHECKPOINT_FILE)
    _prune_snapshots(run_dir, keep=snap)


def _cannot_save(run_dir: Path, round_idx: int, e: BaseException) -> str:
    """One line for a checkpoint that could not be written; the one before it is untouched."""
    free = shutil.disk_usage(run_dir).free
    full = getattr(e, "errno", None) == errno.ENOSPC or free < LOW_DISK_BYTES
    why = f"the disk is full ({free / 1e6:,.0f} MB free)" if full else one_line(e)
    return f"cannot save round {round_idx}'s checkpoint in {run_dir}: {why}; the previous checkpoint is kept"


def restore_files(run_dir: str | os.PathLike, state: dict[str, Any]) -> None:
    """The run directory as it was at the checkpoint: append-only files cut back to their
    sizes then, `clients/` equal to the snapshot."""
    run_dir = Path(run_dir)
    for name, size in state["files"].items():
        path = run_dir / name
        if not path.is_file():
            if size:
                raise FesError(f"cannot resume {run_dir}: {name} is missing (it had {size} bytes at the checkpoint)")
            continue
        if size is None:
            path.unlink()
        elif path.stat().st_size < size:
            raise FesError(f"cannot resume {run_dir}: {name} is shorter than at the checkpoint (changed since)")
        else:
            os.truncate(path, size)
    snap_dir = run_dir / state["snapshot"]
    if not snap_dir.is_dir():
        raise FesError(f"cannot resume {run_dir}: the checkpoint's client snapshot {state['snapshot']} is missing")
    _make_clients_equal(run_dir, snap_dir)
    _prune_snapshots(run_dir, keep=state["snapshot"])


def restore_clients(run_dir: str | os.PathLike, round_idx: int) -> bool:
    """`clients/` as it was at the end of `round_idx` (its snapshot); round -1: empty, as before
    any round. False, and nothing changed, when no snapshot of that round is here."""
    run_dir = Path(run_dir)
    if round_idx < 0:
        shutil.rmtree(run_dir / CLIENTS_DIR, ignore_errors=True)
        shutil.rmtree(run_dir / SNAPSHOT_DIR, ignore_errors=True)
        return True
    snap_dir = run_dir / _snapshot_name(round_idx)
    if not snap_dir.is_dir():
        return False
    _make_clients_equal(run_dir, snap_dir)
    return True


def prune_snapshots(run_dir: str | os.PathLike, keep: int) -> None:
    """Keep the newest `keep` client snapshots (by round)."""
    root = Path(run_dir) / SNAPSHOT_DIR
    if root.is_dir():
        for d in sorted(root.iterdir())[: -keep or None]:
            shutil.rmtree(d, ignore_errors=True)


def _make_clients_equal(run_dir: Path, snap_dir: Path) -> None:
    wanted = _client_files(snap_dir)
    clients = run_dir / CLIENTS_DIR
    for rel, path in _client_files(clients).items():
        if rel not in wanted:
            path.unlink()
    for p in sorted(clients.rglob("*.tmp*")) if clients.is_dir() else []:  # temp files of the abandoned round
        if p.is_file():
            p.unlink()
    for rel, src in wanted.items():
        dst = clients / rel
        if not (dst.exists() and os.path.samefile(src, dst)):
            _place(src, dst)


def check_fresh(run_dir: str | os.PathLike | None) -> None:
    """Before a fresh run (no --resume) into `run_dir`: a run left unfinished there (a checkpoint
    and no completed summary.json) is never overwritten; one line says how to continue it or
    start over. A completed run's folder may be reused (its files are replaced)."""
    if not run_dir or not (Path(run_dir) / CHECKPOINT_FILE).is_file() or _summary_status(Path(run_dir)) == "completed":
        return
    try:
        meta = load_checkpoint(run_dir)
        done = f"rounds 0-{meta['round']} of {meta['num_rounds']} done"
    except FesError:
        done = f"its {CHECKPOINT_FILE} does not load"
    raise FesError(
        f"run directory {run_dir} holds an unfinished run ({done}): pass --resume to continue it, "
        f"or another --run-dir (or remove the folder) to start over"
    )


def check_start(cfg: FesConfig, run_dir: str | os.PathLike | None, resume: bool) -> dict[str, Any] | None:
    """How a run into `run_dir` may start, checked before anything is written, the same for
    every runtime: with `resume`, `check_resume`'s answer; without, None once `check_fresh`
    has found no unfinished run there."""
    if resume:
        return check_resume(cfg, run_dir)
    check_fresh(run_dir)
    return None


def clear_earlier_run(run_dir: str | os.PathLike) -> None:
    """A fresh run in a folder that held another run: that run's checkpoint must never be
    resumed with the new run's files, and its client folders (pseudo labels, trial labels,
    caches) must never be read as the new run's: a labeling pass reads the client's previous
    labels. The server's own `clients/` only: cross-silo silos keep theirs in their own folders."""
    drop_checkpoint(run_dir)
    shutil.rmtree(Path(run_dir) / CLIENTS_DIR, ignore_errors=True)


def drop_checkpoint(run_dir: str | os.PathLike) -> None:
    """The checkpoint and its client snapshot, for a run that needs them no more: only an
    unfinished run resumes, and a fully tuned SmolLM2 run's checkpoint is 0.5 GB (a benchmark
    matrix that kept its finished runs' checkpoints filled 32 GB of disk)."""
    run_dir = Path(run_dir)
    (run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    shutil.rmtree(run_dir / SNAPSHOT_DIR, ignore_errors=True)

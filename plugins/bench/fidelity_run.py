"""Running the fidelity suite: the pending runs (a finished run with the same config is skipped),
a stopped run continuing from its checkpoint, the one MLM build before any run, and the runs
themselves, in this process or in --jobs worker processes (spawned; _worker_loop is looked up
by its module path); then the report (fidelity_report.py).
"""

from __future__ import annotations

import json
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError
from fedml_fes_plugins.bench.config import run_config
from fedml_fes_plugins.bench.fidelity_report import report
from fedml_fes_plugins.bench.fidelity_rows import heldout_classes
from fedml_fes_plugins.bench.fidelity_spec import PATH_KEYS, Echo, FidelityOptions, check_options, plans


@dataclass
class Pending:
    dataset: str
    method: str
    seed: int
    cfg: FesConfig
    run_dir: Path

    @property
    def tag(self) -> str:
        return f"{self.dataset} {self.method} s{self.seed}"


# ---- pending runs ---------------------------------------------------------------------------


def pending_runs(o: FidelityOptions) -> tuple[list[Pending], int]:
    """(runs to do, runs already complete); a finished run made with another config is an error."""
    from fedml_fes_plugins.bench.runner import _config_changes, _status, run_dir_of

    todo, done = [], 0
    for name, plan in plans(o).items():
        for method, seed in plan.run_names():
            cfg = run_config(plan, method, seed)
            rd = run_dir_of(Path(o.out) / name, method, seed)
            if _status(rd) == "completed":
                changed = [k for k in _config_changes(rd, cfg) if k not in PATH_KEYS]
                if changed:
                    raise FesError(
                        f"{rd} was run with a different config ({', '.join(changed[:4])} changed); "
                        f"use another --out or remove that run directory"
                    )
                done += 1
                continue
            todo.append(Pending(name, method, seed, cfg, rd))
    return todo, done


# ---- running ---------------------------------------------------------------------------------


def run_fidelity(o: FidelityOptions, echo: Echo = print) -> Path:
    """Run what is not finished yet (resumable), then write the CSV and the report."""
    check_options(o)
    todo, done = pending_runs(o)
    out = Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    _log_command(o)
    echo(
        f"fidelity benchmark: {len(todo) + done} runs, {done} already complete, {len(todo)} to do in {out} "
        f"({o.jobs} at a time)"
    )
    if todo:
        from fedml_fes_plugins.bench.runner import BenchInterrupted
        from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

        preflight(todo)
        mixed = precision_mismatch(todo, out)
        if mixed:
            echo(mixed)
        try:
            for p in todo:  # the one MLM build, before any run: parallel runs must not build it twice
                ensure_mlm_build(p.cfg, echo)
        except KeyboardInterrupt:
            raise BenchInterrupted(
                "fidelity interrupted while building the MLM head (nothing half-built is "
                "cached); run the same command again to resume"
            ) from None
        started = time.time()
        failed = o.failed = _run_all(todo, o.jobs, echo)
        echo(
            f"{len(todo) - len(failed)} of {len(todo)} runs completed in {(time.time() - started) / 60:.1f} min"
            + (f"; failed: {', '.join(failed)} (the next invocation runs them again)" if failed else "")
        )
    return report(o, echo)


def preflight(todo: list[Pending]) -> None:
    """Each pending (dataset, method)'s dry-run checks (data, PVP against the classes, model shapes on
    the meta device; seconds, no weights), before the MLM build or any run: a dataset file whose
    verbalizer misses a class fails here in one line, not after an hour of other runs."""
    from fedml_fes.runtime.preview import preview_run

    seen: set[tuple[str, str]] = set()
    for p in todo:
        if (p.dataset, p.method) not in seen:
            seen.add((p.dataset, p.method))
            try:
                preview_run(p.cfg)
            except FesError as e:
                raise FesError(f"{p.dataset}, {p.method}: {e} (checked before any run: nothing was run)") from None


def precision_mismatch(todo: list[Pending], out: Path) -> str:
    """A warning line when this machine would compute the pending runs in another precision than
    the runs already under `out`, finished or stopped (`common_args.precision: auto` is bfloat16
    only where the CPU has AMX-BF16 or AVX-512 BF16): their rows would not pair seed by seed, a
    stopped run continued here would mix the two, and the config check cannot see it (the config
    says `auto` either way). Empty when they agree."""
    from fedml_fes.precision import resolve_precision
    from fedml_fes.report.metrics import summary_devices
    from fedml_fes.runtime.job import select_device

    made: dict[str, int] = {}
    for summary in Path(out).glob("*/runs/*/summary.json"):
        try:
            s = json.loads(summary.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        # a run resumed on another machine counts in each precision its rounds were computed in
        for precision in {device.rsplit(", ", 1)[-1] for device in summary_devices(s)}:
            made[precision] = made.get(precision, 0) + 1
    here = sorted({resolve_precision(p.cfg.common.precision, select_device(p.cfg)) for p in todo})
    if not made or set(here) == set(made):  # one precision in the folder, and it is this machine's
        return ""
    counts = ", ".join(f"{n} in {k}" for k, n in sorted(made.items()))
    return (
        f"warning: the runs already in {out} (finished or stopped) were computed {counts}; this machine "
        f"computes the {len(todo)} pending in {' and '.join(here)}, so their rows will not pair with "
        "them and a stopped run continued here would mix the two (common_args.precision: auto is "
        "bfloat16 only on CPUs with AMX-BF16 or AVX-512 BF16, or a GPU); Ctrl-C keeps what is finished"
    )


def _result_line(p: Pending, status: dict) -> str:
    final = status.get("final")
    acc = f"final accuracy {final:.4f}" if isinstance(final, (int, float)) else "no accuracy"
    err = f" ({status['error']})" if status.get("error") else ""
    return f"{p.tag}: {status.get('status')}, {acc}, {status.get('seconds', 0):.0f} s{err}"


def resumable(p: Pending, echo: Echo) -> bool:
    """Whether a stopped run continues from its checkpoint (the rounds it finished are kept, as
    `fedml-fes run --resume` keeps them); a run with no checkpoint, or one the config no longer
    matches, is set aside in `.partial/` and starts again. A folder that a live run holds (another
    harness, `fedml-fes run`) is one error line: neither continued nor moved."""
    from fedml_fes.runtime.checkpoint import check_resume
    from fedml_fes.runtime.rundir import check_not_locked
    from fedml_fes_plugins.bench.runner import _set_aside

    if not p.run_dir.exists():
        return False
    check_not_locked(p.run_dir)
    try:
        state = check_resume(p.cfg, p.run_dir)
    except FesError:
        _set_aside(p.run_dir, echo)
        return False
    echo(f"{p.tag}: continuing after round {state['round']} of {state['num_rounds']} from its checkpoint")
    return True


def _run_all(todo: list[Pending], jobs: int, echo: Echo) -> list[str]:
    """Run every pending run; returns the tags of those that did not complete."""
    from fedml_fes_plugins.bench.runner import BenchInterrupted
    from fedml_fes_plugins.runtimes.signals import stop_on_signals

    failed: list[str] = []
    if jobs == 1:
        # a SIGINT or SIGTERM that lands inside torch.save (a checkpoint being written) comes
        # out as RuntimeError "unexpected pos": under stop_on_signals the run still knows it
        # was a stop (signals.stop_requested), marks itself interrupted and the harness stops
        # instead of calling it failed and starting the next run
        with stop_on_signals():
            for i, p in enumerate(todo, 1):
                try:
                    resume = resumable(p, echo)
                except FesError as e:  # a live run holds it
                    echo(f"[{i}/{len(todo)}] {p.tag}: {e}")
                    failed.append(p.tag)
                    continue
                echo(f"[{i}/{len(todo)}] {p.tag}")
                try:
                    status = run_job(p.cfg, str(p.run_dir), p.tag, resume)
                except KeyboardInterrupt:
                    raise BenchInterrupted(
                        f"fidelity interrupted during {p.tag}; finished runs are kept in "
                        f"{p.run_dir.parent} (the interrupted one is marked so); run the same "
                        f"command again to resume"
                    ) from None
                echo(f"[{i}/{len(todo)}] {_result_line(p, status)}")
                if status.get("status") != "completed":
                    failed.append(p.tag)
        return failed
    return _run_parallel(todo, jobs, echo)


def stop_workers(procs: list, wait_s: float = 60) -> None:
    """SIGTERM each worker (its run marks itself interrupted and keeps its last checkpoint), wait
    up to `wait_s` for them, then SIGKILL what is left. A second stop while waiting (a
    KeyboardInterrupt) goes straight to SIGKILL, so the harness still ends its workers and names
    the runs it stopped."""
    try:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=wait_s)
    except KeyboardInterrupt:
        pass
    for proc in procs:
        if proc.is_alive():
            proc.kill()


def run_job(cfg: FesConfig, run_dir: str, tag: str, resume: bool = False) -> dict[str, Any]:
    """One run (or the rest of a checkpointed one, `resume`), in this process, holding its folder's
    lock as `fedml-fes run` does (two harnesses on one --out never write one run together); its
    test-set class counts go beside it (the majority-class rate)."""
    from fedml_fes.runtime.checkpoint import drop_checkpoint
    from fedml_fes.runtime.rundir import make_run_dir, release_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    start = time.time()
    try:
        summary = run_in_process(
            cfg,
            make_run_dir(cfg, run_dir, lock=True),
            progress=False,
            echo=lambda line: print(f"  [{tag}] {line}", flush=True),
            resume=resume,
        )
    except FesError as e:
        return {"status": "failed", "error": str(e), "seconds": time.time() - start}
    finally:
        release_run_dir(run_dir)  # the next run of this process, or another process, may take it
    heldout_classes(Path(run_dir), cfg)
    if summary.get("status") == "completed":
        drop_checkpoint(run_dir)  # the report reads the run's files; only an unfinished run resumes
    return {"status": summary.get("status"), "final": summary.get("final"), "seconds": time.time() - start}


def _worker_loop(tasks, results) -> None:  # runs in a child process (spawn)
    """Take runs from `tasks` until None; SIGINT is the parent's to handle, SIGTERM interrupts the
    run (also inside torch.save: stop_on_signals, as in `_run_all`)."""
    from fedml_fes_plugins.adapters.hard_exit import remove_module_temp_folders
    from fedml_fes_plugins.runtimes.signals import stop_on_signals

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_on_signals((signal.SIGTERM,)):
            _take_runs(tasks, results)
    except KeyboardInterrupt:  # the run (if any) has marked itself interrupted
        return
    finally:  # a spawned worker ends in os._exit: no exit handlers remove wandb's temp folders
        remove_module_temp_folders()


def _take_runs(tasks, results) -> None:
    while True:
        item = tasks.get()
        if item is None:
            return
        key, cfg, run_dir, tag, resume = item
        try:
            results.put((key, run_job(cfg, run_dir, tag, resume)))
        except Exception as e:  # noqa: BLE001 (anything unexpected: one line, the run is redone next time)
            results.put((key, {"status": "failed", "error": f"{type(e).__name__}: {e}"}))


def _run_parallel(todo: list[Pending], jobs: int, echo: Echo) -> list[str]:
    """`jobs` long-lived worker processes (one import of torch each), one run at a time per worker."""
    import multiprocessing as mp
    import queue as queue_mod

    from fedml_fes_plugins.bench.runner import BenchInterrupted
    from fedml_fes_plugins.runtimes.signals import stop_on_signals

    ctx = mp.get_context("spawn")  # no fork after torch has started threads
    results = ctx.Queue()
    workers = []
    for _ in range(min(jobs, len(todo))):
        tasks = ctx.Queue()
        proc = ctx.Process(target=_worker_loop, args=(tasks, results), daemon=True)
        proc.start()
        workers.append({"proc": proc, "tasks": tasks, "job": None})
    waiting = deque(enumerate(todo))
    failed: list[str] = []
    finished = 0
    try:
        with stop_on_signals():  # SIGTERM too: the default action would leave the workers running on
            while waiting or any(w["job"] is not None for w in workers):
                for w in workers:
                    while w["job"] is None and waiting:
                        i, p = waiting.popleft()
                        try:
                            resume = resumable(p, echo)
                        except FesError as e:  # a live run holds it
                            finished += 1
                            failed.append(p.tag)
                            echo(f"[{finished}/{len(todo)}] {p.tag}: {e}")
                            continue
                        echo(f"[start {i + 1}/{len(todo)}] {p.tag}")
                        w["job"] = (i, p, time.time())
                        w["tasks"].put((i, p.cfg, str(p.run_dir), p.tag, resume))
                try:
                    key, status = results.get(timeout=5)
                except queue_mod.Empty:
                    for w in workers:  # a worker that died (killed, out of memory) fails its run
                        if w["job"] is not None and not w["proc"].is_alive():
                            i, p, t0 = w["job"]
                            failed.append(p.tag)
                            finished += 1
                            echo(f"[{finished}/{len(todo)}] {p.tag}: worker exited with code {w['proc'].exitcode}")
                            w["job"] = None
                            tasks = ctx.Queue()
                            w["tasks"], w["proc"] = (
                                tasks,
                                ctx.Process(target=_worker_loop, args=(tasks, results), daemon=True),
                            )
                            w["proc"].start()
                    continue
                w = next(w for w in workers if w["job"] is not None and w["job"][0] == key)
                i, p, _ = w["job"]
                w["job"] = None
                finished += 1
                echo(f"[{finished}/{len(todo)}] {_result_line(p, status)}")
                if status.get("status") != "completed":
                    failed.append(p.tag)
    except KeyboardInterrupt:
        running = [w["job"][1].tag for w in workers if w["job"] is not None]
        with stop_on_signals():  # a second SIGINT or SIGTERM (Ctrl-C twice, `timeout`) while stopping
            stop_workers([w["proc"] for w in workers])
        raise BenchInterrupted(
            f"fidelity interrupted during {', '.join(running) or 'scheduling'}; finished runs "
            f"are kept (interrupted ones continue from their last checkpoint); run the same command "
            f"again to resume"
        ) from None
    for w in workers:
        w["tasks"].put(None)
    for w in workers:
        w["proc"].join(timeout=60)
    return failed


def _log_command(o: FidelityOptions) -> None:
    path = Path(o.out) / "fidelity.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    meta["config"] = o.cf
    meta.setdefault("commands", [])
    meta["commands"].append({"command": o.command, "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    path.write_text(json.dumps(meta, indent=2))

"""In-process runtime: one Python process drives FedML's trainer and aggregator plugins.

The embedded default (`fedml-fes demo`, `fedml-fes run`). The same `RoundServer` and the
same FedML plugin objects as under mpirun, with function calls instead of messages.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError, one_line
from fedml_fes.report.metrics import format_row
from fedml_fes.runtime.job import build_job
from fedml_fes.runtime.spill import DEFAULT_MIN_BYTES, GlobalSpill, UpdateSpill
from fedml_fes_plugins.adapters.aggregator import FesAggregator
from fedml_fes_plugins.adapters.offline import offline_fedml_init
from fedml_fes_plugins.adapters.trainer import FesTrainer
from fedml_fes_plugins.runtimes.signals import interrupt_reason, stop_requested


def ensure_mlm_build(cfg: FesConfig, echo: Callable[[str], None] = print, progress: bool = False) -> None:
    """Build the FedBERT MLM head named by model_args.mlm_from if it is not cached yet, for the
    methods that read it (prompt models); a head classifier (FedCLS, Pseudo-only) never does."""
    from fedml_fes.data.federated import load_splits
    from fedml_fes.pretrain.cache import load_cached_info
    from fedml_fes.pretrain.source import mlm_build_config
    from fedml_fes.runtime.methods import get_method
    from fedml_fes.runtime.rundir import make_run_dir

    if not getattr(get_method(cfg.train.method), "prompt", False):
        return
    mlm_cfg = mlm_build_config(cfg)
    if mlm_cfg is None or load_cached_info(mlm_cfg) is not None:
        return
    load_splits(cfg)  # the job's own data first: a missing dataset stops here, not after the build
    echo(f"building the MLM head first ({cfg.model.mlm_from}); it is cached for later runs")
    run_in_process(mlm_cfg, make_run_dir(mlm_cfg), progress=progress, echo=echo)


def return_freed_memory() -> None:
    """Give the heap that a phase freed back to the system (glibc's malloc_trim; elsewhere a
    no-op). glibc keeps freed blocks for reuse: after one SmolLM2-135M client's full-model
    training (AdamW's moments, the gradients, the update) the process stayed at 3.79 GB RSS
    with 1.92 GB of it free heap, memory a run side by side could not use."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl)
            pass


def run_in_process(
    cfg: FesConfig,
    run_dir: Path,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    resume: bool = False,
    spill_min_bytes: int = DEFAULT_MIN_BYTES,
) -> dict[str, Any]:
    """Run the config in this process. `resume`: continue the run in `run_dir` from its
    checkpoint (`fedml_fes.runtime.checkpoint`). `spill_min_bytes`: client updates this large
    wait on disk for the round's aggregation (`runtime.spill`; `benchmarks/run_memory.py`
    compares it with holding them). A stop (Ctrl-C, SIGTERM under
    `signals.stop_on_signals`) abandons the round in progress, writes summary.json with status
    `interrupted` and re-raises; a failure writes it with status `failed`. Before the session
    exists (loading), summary.json holds the checkpoint's rounds when resuming, else none."""
    from fedml_fes.runtime.methods import get_method

    method_name = cfg.train.method
    method = get_method(method_name)
    job = None
    session = None
    bar = None
    global_spill = None
    try:
        ensure_mlm_build(cfg, echo, progress)
        cached = method.cached_result(cfg)  # before loading anything
        if cached is not None:
            echo(
                f"reusing cached {method_name} build at {cached.get('path')} "
                f"({method.primary_metric}={cached.get(method.primary_metric)})"
            )
            return {"status": "cached", **cached, "run_dir": str(run_dir)}
        # Shown at once: loading, the initial evaluation and (builds) every optimizer step. Without
        # a bar, builds (methods that count steps) say each phase in a line instead.
        stepwise = hasattr(method, "set_progress")
        bar = tqdm(
            total=cfg.train.comm_round,
            desc=f"{method_name}: loading data and model",
            unit="round",
            disable=not progress,
            dynamic_ncols=True,
        )
        say = bar.write if progress else echo

        def phase(what: str) -> None:
            if progress:
                bar.set_description(f"{method_name}: {what}")
            elif stepwise:
                echo(f"{method_name}: {what}")

        if not progress:
            phase("loading data and model")
        args = cfg.flat_args()
        args.training_type, args.backend = "simulation", "sp"
        args = offline_fedml_init(args, run_dir)
        job = build_job(cfg, role="both", run_dir=run_dir)
        # Trainer and aggregator share one model object: the trainer overwrites every trainable
        # tensor with the global ones before each client, so sharing only saves memory.
        args.fes_job = job  # what the FedML plugins share, as create_model leaves it for a FedMLRunner script
        trainer = FesTrainer(job.model, args)
        aggregator = FesAggregator(job.model, args)
        phase("initial evaluation")
        session = aggregator.open(run_dir, runtime="in_process", resume=resume)
        server = session.server
        if session.next_round:
            say(f"resuming after round {session.next_round - 1} of {server.num_rounds} ({run_dir}/checkpoint.pt)")
        metric = job.method.primary_metric
        if stepwise:
            per_round = min(
                cfg.train.client_num_per_round, len(job.method.eligible_clients(job.data))
            ) * job.method.steps_per_task(cfg)
            phase(f"training, {server.num_rounds} rounds x {per_round} steps")
            if progress:
                bar.unit, bar.total = "step", server.num_rounds * per_round
                bar.update(min(session.next_round, server.num_rounds) * per_round)
                job.method.set_progress(lambda: bar.update(1))
        else:
            phase("training")
            bar.update(min(session.next_round, server.num_rounds))
        bar.refresh()
        phases = aggregator.phases  # the round's phases, as every runtime sequences them; checkpointed
        # full-model updates wait for the round's aggregation on disk, not in memory, and so do
        # the server's global tensors while clients train (runtime.spill)
        spill = UpdateSpill(run_dir / "updates", min_bytes=spill_min_bytes)
        global_spill = GlobalSpill(run_dir / "global", min_bytes=spill_min_bytes)
        server.park_global(global_spill)
        while not phases.done:
            global_params = server.global_params() if phases.tasks else None
            try:
                row = aggregator.finish_phase([spill.keep(trainer.run_task(t, global_params)) for t in phases.tasks])
            finally:
                spill.clear()
                return_freed_memory()
            stop = stop_requested()
            if stop is not None:  # a stop some library swallowed: honoured between phases
                raise stop
            if row is None:
                continue
            if not stepwise:
                bar.update(1)
            say(format_row(row, metric))
        if stepwise:
            phase("saving")
        return session.complete()
    except BaseException as e:
        stop = e if isinstance(e, KeyboardInterrupt) else stop_requested()
        _close(session, e, stop, run_dir, method.primary_metric, resume)
        if stop is not None:
            if stop is e:
                raise
            raise stop from None  # the signal, whatever C++ code turned its exception into (torch.save)
        if session is None or isinstance(e, (FesError, SystemExit)):
            raise
        raise FesError(f"run failed in round {len(session.recorder.rows)}: {one_line(e)} (details in {run_dir})") from e
    finally:
        if global_spill is not None:
            global_spill.clear()
        if job is not None and hasattr(method, "set_progress"):
            job.method.set_progress(None)
        if bar is not None:
            bar.close()


def _close(
    session, error: BaseException, stop: KeyboardInterrupt | None, run_dir: Path, primary_metric: str, resume: bool
) -> None:
    """summary.json for a run that stopped (`stop`) or failed, whenever it happened: the
    session's, or before the session existed the checkpoint's rounds when resuming (none
    otherwise). Nothing when the session already closed itself."""
    from fedml_fes.runtime.session import summary_from_checkpoint

    if session is None:
        summary_from_checkpoint(
            run_dir,
            primary_metric,
            "in_process",
            "interrupted" if stop is not None else "failed",
            interrupt_reason(stop) if stop is not None else one_line(error),
            since=None if resume else float("inf"),
        )
    elif session.closed:
        return
    elif stop is not None:
        session.interrupt(interrupt_reason(stop))
    else:
        session.fail(one_line(error))  # what was computed is kept

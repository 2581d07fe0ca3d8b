"""In-process runtime: one Python process drives FedML's trainer and aggregator plugins.

The embedded default (`fedml-fes demo`, `fedml-fes run`). The same `RoundServer` and the
same FedML plugin objects as under mpirun, with function calls instead of messages.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from fedml_fes.config import FesConfig
from fedml_fes.errors import FesError
from fedml_fes.runtime.job import build_job

from .aggregator import FesServerAggregator
from .fedml_offline import offline_fedml_init
from .trainer import FesClientTrainer


def _shown(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def format_row(row: dict[str, Any], metric: str) -> str:
    line = f"round {row['round']:>3}: {metric}={_shown(row.get(metric))}  train_loss={row['train_loss']:.4f}"
    if "pseudo_total" in row and "pseudo_acc" in row:
        line += f"  pseudo={row['pseudo_total']} (pass acc {_shown(row['pseudo_acc'])})"
    return line + f"  clients={row['clients']}  {row['round_wall_s']:.1f}s"


def ensure_mlm_build(cfg: FesConfig, echo: Callable[[str], None] = print) -> None:
    """Build the FedBERT MLM head named by model_args.mlm_from if it is not cached yet."""
    from fedml_fes.pretrain.cache import load_cached_info
    from fedml_fes.pretrain.source import mlm_build_config
    from fedml_fes.runtime.job import make_run_dir

    mlm_cfg = mlm_build_config(cfg)
    if mlm_cfg is None or load_cached_info(mlm_cfg) is not None:
        return
    echo(f"building the MLM head first ({cfg.model.mlm_from}); it is cached for later runs")
    run_in_process(mlm_cfg, make_run_dir(mlm_cfg), progress=False, echo=echo)


def run_in_process(cfg: FesConfig, run_dir: Path, progress: bool = True,
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    from fedml_fes.runtime.session import ServerSession

    ensure_mlm_build(cfg, echo)
    args = cfg.flat_args()
    args.training_type, args.backend = "simulation", "sp"
    args = offline_fedml_init(args, run_dir)
    job = build_job(cfg, role="both", run_dir=run_dir)
    cached = job.method.cached_result(cfg)
    if cached is not None:
        echo(f"reusing cached {cfg.train.method} build at {cached.get('path')} "
             f"({job.method.primary_metric}={cached.get('masked_token_acc')})")
        return {"status": "cached", **cached, "run_dir": str(run_dir)}
    # Trainer and aggregator share one model object: the trainer overwrites every trainable
    # tensor with the global ones before each client, so sharing only saves memory.
    trainer = FesClientTrainer(job, args)
    aggregator = FesServerAggregator(job, args)
    session = ServerSession(job, aggregator, run_dir, runtime="in_process")
    server = session.server
    metric = job.method.primary_metric
    bar = tqdm(range(server.num_rounds), desc=f"{cfg.train.method} rounds", disable=not progress,
               dynamic_ncols=True)
    try:
        for r in bar:
            global_params = server.global_params()
            label_tasks = server.plan_labeling(r)
            if label_tasks:
                server.finish_labeling(r, [trainer.run_task(t, global_params) for t in label_tasks])
            tasks = server.plan(r)
            updates = [trainer.run_task(t, global_params) for t in tasks]
            row = server.finish_round(r, updates, planned=len(tasks))
            (bar.write if progress else echo)(format_row(row, metric))
    except KeyboardInterrupt:
        session.fail("interrupted by user", status="interrupted")
        raise
    except FesError as e:
        session.fail(str(e))
        raise
    except Exception as e:  # keep what was computed, then report one line
        session.fail(f"{type(e).__name__}: {e}")
        raise FesError(f"run failed in round {len(session.recorder.rows)}: {type(e).__name__}: {e} "
                       f"(details in {run_dir})") from e
    finally:
        bar.close()
    return session.complete()

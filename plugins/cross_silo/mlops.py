"""Run a FeS cross-silo process the way a FedML MLOps (Octopus) agent starts a package.

The agent unzips the package built by `deploy/build_mlops_packages.sh`, rewrites its
`config/fedml_config.yaml` with the run's values and starts

    python fes_mlops_entry.py --cf <package>/fedml/config/fedml_config.yaml --rank N --role server|client

The rewrite overwrites FedML-layout keys (train_args.client_num_per_round becomes the
number of edges, for instance), so the FeS job itself ships untouched in
`config/fes_config.yaml`, and `fedml_config.yaml` is only the MLOps shell. From the shell
this module takes what the agent fills in:

    train_args.run_id          MQTT topic namespace
    train_args.client_id_list  the server: every edge id, in rank order; a client: its own
    train_args.client_num_in_total   the number of edges (silos), K
    train_args.server_id       the server's edge id (in MQTT topics)
    comm_args.mqtt_config_path / s3_config_path   the run's broker and bucket (FedML YAML)

plus an optional `fes_overrides` mapping of `section.key: value` (tune a run from the
MLOps UI without rebuilding). It then runs `cross_silo.main` over MQTT_S3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from fedml_fes.errors import FesError
from fedml_fes_plugins.cross_silo.main import TAG


def _yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise FesError(f"{what} not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise FesError(f"{what} is not a YAML mapping: {path}")
    return data


def _ids(value: Any) -> list[int]:
    """FedML writes id lists as '[1,2]' strings (or YAML lists)."""
    try:
        ids = json.loads(value) if isinstance(value, str) else value
        return [int(i) for i in ids]
    except (TypeError, ValueError, json.JSONDecodeError):
        raise FesError(f"train_args.client_id_list must be a list of edge ids, got {value!r}") from None


def effective_config(shell_path: Path, role: str, rank: int) -> tuple[dict[str, Any], dict[int, int], int]:
    """The FeS config this process runs, its silos' edge ids by rank, and the server's id."""
    shell = _yaml(shell_path, "FedML config")
    config_dir = shell_path.parent
    train, comm = shell.get("train_args") or {}, shell.get("comm_args") or {}
    fes = _yaml(config_dir / "fes_config.yaml", "FeS job config")
    for dotted, value in (shell.get("fes_overrides") or {}).items():
        sec, _, key = str(dotted).partition(".")
        fes.setdefault(sec, {})[key] = value
    ids = _ids(train.get("client_id_list", "[]"))
    silo_num = int(train.get("client_num_in_total") or len(ids))
    if role == "server":
        if len(ids) != silo_num:
            raise FesError(f"the server got {len(ids)} edge ids for {silo_num} clients (train_args.client_id_list)")
        silo_ids = {r: e for r, e in enumerate(ids, start=1)}
    else:
        if len(ids) != 1:
            raise FesError(f"a client expects its own edge id in train_args.client_id_list, got {ids}")
        silo_ids = {rank: ids[0]}

    def side_file(key: str) -> dict[str, Any]:
        value = comm.get(key)
        if not value:
            raise FesError(f"comm_args.{key} is not set: the MLOps agent writes it for every run")
        path = Path(value) if Path(value).is_absolute() else config_dir / Path(value).name
        return _yaml(path, f"comm_args.{key}")

    fes.setdefault("common_args", {})["training_type"] = "cross_silo"
    fes_comm = fes.setdefault("comm_args", {})
    fes_comm.update(
        {
            "backend": "MQTT_S3",
            "silo_num": silo_num,
            "run_id": f"fes-{train.get('run_id', 0)}",
            "customized_training_mqtt_config": side_file("mqtt_config_path"),
            "customized_training_s3_config": side_file("s3_config_path"),
        }
    )
    return fes, silo_ids, int(train.get("server_id") or 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="FeS cross-silo process under FedML MLOps")
    p.add_argument("--cf", required=True, help="the package's config/fedml_config.yaml (rewritten by the agent)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--role", choices=("server", "client"), required=True)
    p.add_argument("--run-dir", default=None)
    opts, _unknown = p.parse_known_args(argv)  # the agent may add flags of its own

    def emit(line: str) -> None:
        print(TAG + line, flush=True)

    try:
        shell = Path(opts.cf).resolve()
        fes, silo_ids, server_id = effective_config(shell, opts.role, opts.rank)
        effective = shell.parent / f"fes_effective_{opts.role}{opts.rank}.yaml"
        effective.write_text(yaml.safe_dump(fes, sort_keys=False))
        from fedml_fes_plugins.cross_silo.main import run_guarded

        run = argparse.Namespace(role=opts.role, rank=opts.rank, cf=str(effective), run_dir=opts.run_dir, set=[])
        return run_guarded(run, emit, silo_ids=silo_ids, server_id=server_id)
    except FesError as e:
        emit(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

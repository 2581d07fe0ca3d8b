"""FeS as a FedML plugin: what a FedML user's own `FedMLRunner(...)` script imports.

    import fedml
    from fedml import FedMLRunner
    from fedml_fes_plugins import fedml_plugin as fes

    args = fes.init()                                  # fedml.init(), offline, on a FeS config
    device = fedml.device.get_device(args)
    dataset, class_num = fes.load_data(args)           # FedML's 8-element dataset list
    model = fes.create_model(args, dataset)            # the method's model (prompt MLM or classifier)
    trainer = fes.FesTrainer(model, args)              # a fedml.core.ClientTrainer
    aggregator = fes.FesAggregator(model, args)        # a fedml.core.ServerAggregator
    FedMLRunner(args, device, dataset, model, trainer, aggregator).run()

(`mpi/fedml_fes_main.py` is exactly this.) FedML's cross-silo runtime (`training_type:
cross_silo`; the MPI backend under `mpirun -np 1+W`, or the gRPC backend with one process per
rank of FedML's ipconfig CSV) moves the messages and calls every hook;
the FeS objects decide everything else, through the same `RoundServer` and `LocalTrainer`
as the in-process runtime, so the same config and seed give the same metrics.

What FedML does and what FeS adds, and how the two fit:
- A FedML "client" is a silo (one process, rank 1..W); a FeS client is one of
  `data_args.client_num_in_total` phones whose data every silo can read (each process builds
  the same partition from the seed). `init()` therefore tells FedML that every silo takes
  part in every round (`client_num_in_total = client_num_per_round = worker_num`); FeS
  chooses its own clients.
- FedML exchanges one params dict each way per round. A FeS round has up to two phases
  (`label`, then `train`: the labeling event decides who trains), so one FedML round is one
  phase and `init()` sets FedML's `comm_round` to rounds x phases (`runtime/phases.py`).
- What FedML's messages do not carry travels inside the params dict
  (`fedml_fes/runtime/payload.py`): the server's dict holds the phase's plan (which FeS
  client each silo plays, and what it does); a silo's dict holds every client it played,
  with weight, metrics and pseudo-label report. A silo knows its slot from FedML's
  `set_id(rank - 1)`; each `ClientData` it trains on carries its FeS client id, checked
  against the task.
- FedML's own selection, FedAvg and server-side test are bypassed by the hooks:
  `on_before_aggregation` unpacks the silos' answers, `aggregate` closes the phase (FedAvg
  over accepted updates, evaluation, metrics row, next plan) and returns the next message,
  `test` reports the scores the round logic already computed.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()

from fedml_fes.config import FesConfig, add_set_argument, load_config
from fedml_fes.errors import FesError
from fedml_fes.runtime.job import build_job
from fedml_fes.runtime.methods import get_method
from fedml_fes.runtime.phases import phases_per_round
from fedml_fes.runtime.rundir import make_run_dir

# the FedML plugins a FedMLRunner script passes: one trainer/aggregator pair for every runtime
from fedml_fes_plugins.adapters.aggregator import FesAggregator, run_dir_of
from fedml_fes_plugins.adapters.data_loader import config_from_args, load
from fedml_fes_plugins.adapters.hard_exit import abort_mpi, leave
from fedml_fes_plugins.adapters.trainer import FesTrainer

__all__ = ["init", "load_data", "create_model", "FesTrainer", "FesAggregator", "ServerWatch", "MqttServerWatch"]


class ServerWatch:
    """FedML's gRPC silo waits for the server's next message forever, so a server that failed
    and exited would leave every silo hanging. Once a silo has heard from the server, this
    thread checks every second that the server's gRPC port still takes connections; after
    `grace_s` of refusals it says so in one line and ends the silo. (A finished run tells the
    silos first: FedML's FINISH message ends them well within the grace.)"""

    def __init__(self, ip: str, port: int, rank: int, grace_s: float = 30.0, every_s: float = 1.0):
        self.ip, self.port, self.rank, self.grace_s, self.every_s = ip, port, rank, grace_s, every_s
        self.armed = threading.Event()
        threading.Thread(target=self._watch, name="fes-server-watch", daemon=True).start()

    def heard(self) -> None:
        self.armed.set()

    def server_alive(self) -> bool:
        try:
            socket.create_connection((self.ip, self.port), timeout=self.every_s).close()
            return True
        except OSError:
            return False

    def stop(self, why: str = "") -> None:
        """End this silo in one line (used by the watch thread and by a send that failed)."""
        detail = f" ({why})" if why else ""
        print(
            f"error: the server (rank 0 at {self.ip}:{self.port}) is gone; silo rank {self.rank} stops{detail}",
            flush=True,
        )
        leave(1)

    def _watch(self) -> None:
        self.armed.wait()
        gone_since = None
        while True:
            time.sleep(self.every_s)
            if self.server_alive():
                gone_since = None
                continue
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= self.grace_s:
                self.stop()


class MqttServerWatch(ServerWatch):
    """The same watch for FedML's MQTT_S3 silo, which also waits for the server's next message
    forever. There is no server port to probe; instead the server's FedML connection carries
    a last will (FedML 0.9.6 `mqtt_s3_multi_clients_comm_manager.py:98-110`: topic
    `flserver/last_will_msg`, payload `{"ID": <server id>, "status": "OFFLINE"}`) that the
    broker publishes when that connection drops without a goodbye: a server that was killed
    or ended itself after a failure. This watch subscribes to it on its own connection; a live
    will (not the retained copy an earlier run left on the broker) marks the server gone, and
    after `grace_s` (a finished run's FINISH ends the silo well before) the silo stops in one
    line."""

    TOPIC = "flserver/last_will_msg"  # CommunicationConstants.SERVER_TOP_LAST_WILL_MSG

    def __init__(
        self,
        mqtt_config: dict,
        server_id: int,
        rank: int,
        grace_s: float = 30.0,
        every_s: float = 1.0,
        tls: Any = None,
    ):
        import uuid

        import paho.mqtt.client as mqtt

        self.server_id = str(server_id)
        self.gone = threading.Event()
        host, port = str(mqtt_config["BROKER_HOST"]), int(mqtt_config["BROKER_PORT"])
        self.client = mqtt.Client(client_id=f"fes-server-watch-{rank}-{uuid.uuid4().hex[:8]}", clean_session=True)
        if mqtt_config.get("MQTT_USER"):
            self.client.username_pw_set(str(mqtt_config["MQTT_USER"]), str(mqtt_config.get("MQTT_PWD") or ""))
        if tls is not None:  # the silo's own certificate (cross_silo/tls.py)
            self.client.tls_set(ca_certs=tls.ca, certfile=tls.cert, keyfile=tls.key)
        self.client.on_connect = lambda client, _u, _f, _rc: client.subscribe(self.TOPIC, qos=1)
        self.client.on_message = self._on_will
        self.client.connect_async(host, port, int(mqtt_config.get("MQTT_KEEPALIVE") or 60))
        self.client.loop_start()
        super().__init__(host, port, rank, grace_s=grace_s, every_s=every_s)

    def _on_will(self, _client, _userdata, msg) -> None:
        import json

        if msg.retain:  # an earlier run's server, kept by the broker
            return
        try:
            will = json.loads(msg.payload)
        except ValueError:
            return
        if isinstance(will, dict) and str(will.get("ID")) == self.server_id and will.get("status") == "OFFLINE":
            self.gone.set()

    def server_alive(self) -> bool:
        return not self.gone.is_set()

    def stop(self, why: str = "") -> None:
        detail = f" ({why})" if why else ""
        print(
            f"error: the server (rank 0, MQTT broker {self.ip}:{self.port}) is gone; silo rank {self.rank} "
            f"stops{detail}",
            flush=True,
        )
        leave(1)


def parse_cli(argv: list[str] | None) -> argparse.Namespace:
    from fedml_fes.config import parse_overrides

    p = argparse.ArgumentParser(description="A FeS run under FedML's cross-silo runtime (FedMLRunner).")
    p.add_argument("--cf", required=True, help="FeS run config YAML")
    p.add_argument("--run-dir", default=None, help="run directory (default: a new one under output_dir)")
    add_set_argument(p)
    p.add_argument("--rank", type=int, default=None, help="gRPC backend: this process's rank (0 = server)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir after its last checkpointed round (every rank, same flags)",
    )
    opts, _fedml_flags = p.parse_known_args(argv)  # FedML's own flags (--rank, --role) pass through
    opts.overrides = parse_overrides(opts.set)
    return opts


def fedml_args(cfg: FesConfig, run_dir: Path, worker_num: int, start_round: int = 0) -> Any:
    """FedML's flat namespace for a FeS run over `worker_num` silos (see the module doc).

    Shims over FedML 0.9.6, each tested in tests/test_fedml_runner.py:
    - client counts in silos: `fedml/__init__.py:_update_client_id_list` makes the server wait
      for `client_num_per_round` silos, and `cross_silo/server/fedml_aggregator.py:
      data_silo_selection` samples `client_num_per_round` of `client_num_in_total` indices;
      with both equal to `worker_num` every silo takes part in every round (FeS picks clients);
    - `comm_round` in phases: `cross_silo/server/fedml_server_manager.py` and
      `client/fedml_client_master_manager.py` read `args.comm_round` once, at construction,
      and count from 0 on every start: a resumed run (`start_round` > 0) gets the phases left;
    - `fes_config`: FeS reads its typed config from here, never from the flattened keys
      (where `filter_args.method` would shadow `train_args.method`)."""
    uses_pseudo = get_method(cfg.train.method).uses_pseudo
    args = cfg.flat_args()
    args.fes_config = cfg
    args.fes_run_dir = str(run_dir)
    args.training_type, args.scenario, args.backend = "cross_silo", "horizontal", cfg.comm.backend.upper()
    args.worker_num = worker_num
    args.client_num_in_total = args.client_num_per_round = worker_num
    args.comm_round = (cfg.train.comm_round - start_round) * phases_per_round(uses_pseudo)
    args.fes_resume = start_round > 0  # FesAggregator continues from the run directory's checkpoint
    args.frequency_of_the_test = args.comm_round  # FedML's own test cadence; scores come from FeS
    args.client_id_list = None
    args.federated_optimizer = "FedAvg"
    return args


def _mpi_rank() -> int | None:
    """This process's rank when mpirun started it (Open MPI's environment), else None."""
    rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    return int(rank) if rank is not None else None


def init(argv: list[str] | None = None) -> Any:
    """`fedml.init()` for a FeS config: parse `--cf/--run-dir/--set` (and `--rank` for gRPC),
    make the run directory, build the MLM head if the method needs it (rank 0), then run
    FedML's init offline (no cloud call, nothing written outside the run directory).

    MPI backend (`mpirun -np 1+N`): rank 0 makes the run directory and shares it. gRPC
    backend (`comm_args.backend: GRPC`, one process per rank from FedML's ipconfig CSV,
    `comm_args.grpc_ipconfig_path`) and MQTT_S3 (`comm_args.silo_num` silos, the broker and
    bucket in `comm_args.customized_training_*_config`): every process gets `--rank` and
    the same `--run-dir`.
    Bad input ends the process with one line and exit code 1 (under mpirun: from rank 0,
    every rank reads the same config, and every rank ends), never a traceback."""
    try:
        return _init(sys.argv[1:] if argv is None else argv)
    except FesError as e:
        rank = _mpi_rank()
        if rank is None or rank == 0:
            print(f"error: {e}", flush=True)
        else:
            time.sleep(2)  # let rank 0 say it; the same input fails there too
        if rank is not None:
            from mpi4py import MPI

            if MPI.COMM_WORLD.Get_size() > 1:
                abort_mpi(MPI.COMM_WORLD, 1)
        raise SystemExit(1) from None


def _start_round(cfg: FesConfig, opts: argparse.Namespace, server: bool) -> int:
    """The round this process's run starts at: 0, or with --resume the one after the
    checkpointed round (checked before anything is written; the config must match). A fresh
    server refuses a folder that holds an unfinished run, as `fedml-fes run` does."""
    from fedml_fes.runtime.checkpoint import check_start

    if not (opts.resume or server):  # a silo of a fresh run: the server checks the shared folder
        return 0
    point = check_start(cfg, opts.run_dir, opts.resume)
    if point is None:
        return 0
    start = point["round"] + 1
    if start >= cfg.train.comm_round and not point["completed"]:
        raise FesError(
            f"every round of the run in {opts.run_dir} is checkpointed but it was not closed: "
            f"fedml-fes run --cf {opts.cf} --run-dir {opts.run_dir} --resume writes its summary"
        )
    return start


def _network_run_dir(cfg: Any, opts: Any, rank: int) -> tuple[Path, int]:
    """GRPC / MQTT_S3: every process is started with the same --run-dir. The server makes it
    (and builds the MLM head first); a silo only needs it to exist. Every rank reads the
    round to start from (--resume) from the shared run directory."""
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    start = _start_round(cfg, opts, server=rank == 0)
    if rank == 0:
        ensure_mlm_build(cfg)
        return make_run_dir(cfg, opts.run_dir), start
    run_dir = Path(opts.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, start


def _init(argv: list[str]) -> Any:
    from fedml_fes_plugins.adapters.offline import offline_fedml_init
    from fedml_fes_plugins.cross_silo.config import job_fingerprint, read_ipconfig
    from fedml_fes_plugins.runtimes.inprocess import ensure_mlm_build

    opts = parse_cli(argv)
    cfg = load_config(opts.cf, opts.overrides)
    backend = cfg.comm.backend.upper()
    if backend == "MPI":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.Get_size() < 2:
            raise FesError(f"run under mpirun with 1 server + >= 1 silo (-np >= 2), got -np {comm.Get_size()}")
        rank, worker_num = comm.Get_rank(), comm.Get_size() - 1
        run_dir, start = None, 0
        if rank == 0:
            start = _start_round(cfg, opts, server=True)
            ensure_mlm_build(cfg)
            run_dir = str(make_run_dir(cfg, opts.run_dir))
        run_dir, start = comm.bcast((run_dir, start), root=0)
        run_dir = Path(run_dir)
    elif backend == "GRPC":
        if opts.rank is None or not opts.run_dir:
            raise FesError("with comm_args.backend GRPC every process needs --rank (0 = server) and the same --run-dir")
        peers = read_ipconfig(cfg.comm.grpc_ipconfig_path)
        rank, worker_num = opts.rank, cfg.comm.silo_num or len([r for r in peers if r > 0])
        if rank not in peers or worker_num < 1:
            raise FesError(
                f"--rank {rank}: {cfg.comm.grpc_ipconfig_path} needs rows for the server (rank 0) "
                f"and at least one silo; it has ranks {sorted(peers)}"
            )
        run_dir, start = _network_run_dir(cfg, opts, rank)
    elif backend == "MQTT_S3":
        from fedml_fes_plugins.cross_silo.config import mqtt_settings, s3_settings

        worker_num = int(cfg.comm.silo_num)
        if opts.rank is None or not opts.run_dir:
            raise FesError(
                "with comm_args.backend MQTT_S3 every process needs --rank (0 = server) and the same --run-dir"
            )
        if worker_num < 1 or not 0 <= opts.rank <= worker_num:
            raise FesError(
                f"--rank {opts.rank}: comm_args.silo_num is {worker_num}, so ranks are 0 (server) to {worker_num}"
            )
        rank = opts.rank
        mqtt = mqtt_settings(cfg.comm.customized_training_mqtt_config)
        s3 = s3_settings(cfg.comm.customized_training_s3_config)
        run_dir, start = _network_run_dir(cfg, opts, rank)
    else:
        raise FesError(
            f"the FedMLRunner plugins run over MPI (mpirun), GRPC or MQTT_S3; comm_args.backend is '{cfg.comm.backend}'"
        )
    if start >= cfg.train.comm_round:  # --resume of a completed run: every rank leaves
        if rank == 0:
            print(
                f"the run in {run_dir} already completed all {cfg.train.comm_round} rounds; nothing to resume",
                flush=True,
            )
        raise SystemExit(0)
    if start and rank == 0:
        print(f"resuming after round {start - 1} of {cfg.train.comm_round}", flush=True)
    args = fedml_args(cfg, run_dir, worker_num, start)
    if backend in ("GRPC", "MQTT_S3"):  # FedML reads these from its own CLI flags otherwise
        args.rank, args.role = rank, "server" if rank == 0 else "client"
    if backend == "GRPC":
        from fedml_fes_plugins.cross_silo.transport import use_startup_tolerant_grpc

        use_startup_tolerant_grpc()
        args.grpc_ipconfig_path = cfg.comm.grpc_ipconfig_path
        if rank != 0:
            args.fes_server_watch = ServerWatch(peers[0].ip, peers[0].port, rank)
    if backend == "MQTT_S3":
        from fedml_fes_plugins.cross_silo.tls import tls_for
        from fedml_fes_plugins.cross_silo.transport import (
            use_flushing_mqtt_stop,
            use_outgoing_only_inflight_count,
            use_safe_s3_models,
            use_tls_mqtt,
        )

        use_flushing_mqtt_stop()
        use_outgoing_only_inflight_count()
        use_safe_s3_models()
        tls = tls_for(cfg.comm, rank)
        use_tls_mqtt(tls)
        # FedML 0.9.6 `core/distributed/fedml_comm_manager.py:83-97` fetches the FedML cloud's
        # broker and bucket unless both customized configs are set: they always are (checked
        # non-empty above). Topics are `fedml_<run_id>_<server_id>_<client id>`; the silos'
        # ids are their ranks (`fedml/__init__.py:_update_client_id_list`), the server's 0.
        args.run_id = str(cfg.comm.run_id) or f"fes{job_fingerprint(cfg)}"
        args.server_id = 0
        args.customized_training_mqtt_config = dict(mqtt)
        args.customized_training_s3_config = dict(s3)
        if rank != 0:
            args.client_id = rank
            args.fes_server_watch = MqttServerWatch(mqtt, args.server_id, rank, tls=tls)
    return offline_fedml_init(args, run_dir)


def load_data(args: Any) -> tuple[list[Any], int]:
    """FedML's dataset list from the FeS data-loader plugin (see `data_loader.py`)."""
    return load(args)


def create_model(args: Any, dataset: list[Any]):
    """The method's model (prompt MLM or classifier). It builds this process's FeS job (data,
    method, tokenizer, model) once and keeps it in `args.fes_job`, which the trainer and the
    aggregator share, as FedML's plugins share the model. The server rank keeps the label
    oracle (pseudo-label accuracy); silos never hold it."""
    cfg = config_from_args(args)
    role = "server" if int(getattr(args, "rank", 0)) == 0 else "client"
    job = build_job(cfg, role, run_dir_of(args))
    if tuple(job.data.classes) != tuple(dataset[3].classes):
        raise FesError(
            f"the dataset's classes {dataset[3].classes} differ from the config's {job.data.classes}: "
            "load the dataset with fedml_plugin.load_data(args)"
        )
    args.fes_job = job
    return job.model

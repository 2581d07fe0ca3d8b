"""Cross-silo gRPC on one host with more and more silos: round time, server memory, messages.

One server and K silo processes (`fedml_fes_plugins.cross_silo.main`, mutual TLS, one torch
thread each) run bias-only FedCLS on a tiny random BERT (2 layers, hidden 32; no download),
2 devices per silo and K devices per round, so every silo has work in every round. Every silo
reaches the server, and the server every silo, through an unshaped link of
benchmarks/link_shaper.py: gRPC opens one connection per message (FedML's fresh channel per
message), so the links count the messages. Recorded per K: time until every silo had joined,
mean round wall (rounds 1 on; round 0 pays first-call costs), the server's peak resident
memory (VmHWM), the sum of every process's resident memory at the end, messages per round.

    python benchmarks/cross_silo_scale.py --silos 3 8 16 --out benchmarks/results/cross_silo_scale.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from link_shaper import LinkShaper  # noqa: E402


def _round_walls(metrics: list[dict[str, str]], wall: float) -> dict:
    """A scale point's rounds and wall times; the mean leaves out round 0 (joins, first loads)."""
    walls = [float(r["round_wall_s"]) for r in metrics]
    return {
        "rounds": len(metrics),
        "wall_s": round(wall, 1),
        "round_wall_s": [round(w, 3) for w in walls],
        "round_wall_mean_s": round(sum(walls[1:]) / max(len(walls) - 1, 1), 3),
    }


def tiny_bert(path: Path) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedml_fes.config import OFFLINE_MINILM
    from fedml_fes.model_files import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(OFFLINE_MINILM))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertForMaskedLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _pss_kib(pid: int) -> int:
    """Proportional set size: shared pages (torch's libraries) split among the processes
    that map them, so the sum over processes is what they take together."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


class OutOfMemory(RuntimeError):
    pass


def scale_job(trainers: int, model: str, folder: Path, rounds: int) -> dict:
    """The job every scale point runs: bias-only FedCLS on the tiny BERT, 2 devices per trainer
    (silo or mpirun worker), every trainer in every round."""
    return {
        "common_args": {"output_dir": str(folder / "runs"), "torch_threads": 1, "random_seed": 0},
        "data_args": {
            "dataset": "bbc_news",
            "client_num_in_total": 2 * trainers,
            "gold_labels": 4 * trainers,
            "gold_sparsity": 100,
            "max_test_examples": 60,
            "max_train_examples": 400,
        },
        "model_args": {"model": model, "max_seq_length": 32, "tuning": "bias"},
        "train_args": {
            "method": "fedcls",
            "comm_round": rounds,
            "client_num_per_round": trainers,
            "batch_size": 4,
            "learning_rate": 0.001,
        },
    }


def run_k(silos: int, model: str, folder: Path, rounds: int, floor_mib: float) -> dict:
    from fedml_fes_plugins.cross_silo.certs import comm_keys, make_run_certs
    from fedml_fes_plugins.cross_silo.services import free_port

    certs = folder / "certs"
    make_run_certs(certs, silos)
    raw = scale_job(silos, model, folder, rounds)
    raw["common_args"]["training_type"] = "cross_silo"
    raw["comm_args"] = {
        "backend": "GRPC",
        "silo_num": silos,
        "run_id": "scale",
        "round_timeout_s": 300,
        "join_timeout_s": 600,
        "worker_timeout_s": 600,
        **comm_keys(certs),
    }
    shaper = LinkShaper()
    links = {r: shaper.link(f"silo{r}") for r in range(1, silos + 1)}
    ports = {r: free_port() for r in range(silos + 1)}
    down = {r: links[r].forward(ports[r], "down") for r in links}
    up = {r: links[r].forward(ports[0], "up") for r in links}
    procs: dict[int, subprocess.Popen] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_dir = folder / "run"
    t0 = time.monotonic()
    peak_server, total_pss, low = 0, 0, available_mib()
    try:
        for rank in range(silos + 1):
            rows = ["eid,rank,grpc_server_ip,grpc_server_port"]
            for r in range(silos + 1):
                port = ports[r] if r == rank else (down[r] if rank == 0 else (up[rank] if r == 0 else ports[r]))
                rows.append(f"{r},{r},127.0.0.1,{port}")
            (folder / f"ip{rank}.csv").write_text("\n".join(rows) + "\n")
            cfg = json.loads(json.dumps(raw))
            cfg["comm_args"]["grpc_ipconfig_path"] = str(folder / f"ip{rank}.csv")
            (folder / f"rank{rank}.yaml").write_text(yaml.safe_dump(cfg))
            role = "server" if rank == 0 else "client"
            rdir = run_dir if rank == 0 else run_dir / "silos" / str(rank)
            cmd = [sys.executable, "-W", "ignore", "-m", "fedml_fes_plugins.cross_silo.main"]
            cmd += ["--cf", str(folder / f"rank{rank}.yaml"), "--role", role, "--rank", str(rank)]
            cmd += ["--run-dir", str(rdir)]
            log = (folder / f"{role}{rank}.log").open("w")
            procs[rank] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        joined_s = None
        while procs[0].poll() is None:
            peak_server = max(peak_server, _kib(procs[0].pid, "VmHWM"))
            if joined_s is None and "silos joined" in (folder / "server0.log").read_text(errors="replace"):
                joined_s = time.monotonic() - t0
            total_pss = max(total_pss, sum(_pss_kib(p.pid) for p in procs.values()))
            low = min(low, available_mib())
            if low < floor_mib:  # the host is shared: stop before anything is killed for memory
                raise OutOfMemory(f"{silos} silos: MemAvailable fell to {low:.0f} MiB")
            time.sleep(0.25)
        wall = time.monotonic() - t0
        if procs[0].returncode != 0:
            raise RuntimeError((folder / "server0.log").read_text()[-3000:])
        for p in procs.values():
            p.wait(timeout=120)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        shaper.close()
    with (run_dir / "metrics.csv").open() as f:
        metrics = list(csv.DictReader(f))
    walls = [float(r["round_wall_s"]) for r in metrics]
    messages = sum(len(link.connections) for link in links.values())
    return {
        "silos": silos,
        "rounds": len(metrics),
        "joined_s": round(joined_s or 0.0, 1),
        "wall_s": round(wall, 1),
        "round_wall_s": [round(w, 3) for w in walls],
        "round_wall_mean_s": round(sum(walls[1:]) / max(len(walls) - 1, 1), 3),
        "server_peak_rss_MiB": round(peak_server / 1024, 1),
        "all_processes_pss_MiB": round(total_pss / 1024, 1),
        "per_process_pss_MiB": round(total_pss / 1024 / (silos + 1), 1),
        "host_available_min_MiB": round(low),
        "messages_total": messages,
        "messages_per_round": round(messages / len(metrics), 1),
        "test_acc": [float(r["test_acc"]) for r in metrics],
    }


def _procs_under(folder: Path) -> list[int]:
    """Every process whose command line names `folder` (mpirun, its ranks, the launcher)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(folder) in (d / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
    return pids


def follow_fes(
    args: list[str], folder: Path, log_name: str, what: str, floor_mib: float, server_role: str | None = None
) -> tuple[float, list[dict], int, float, int]:
    """Run `fedml-fes ARGS` (one torch thread per process) until it ends, sampling every
    process under `folder`: (wall s, metrics.csv rows of folder/run, peak summed PSS KiB,
    lowest MemAvailable MiB, peak VmHWM KiB of the process whose command line holds
    `server_role`). Stops it when MemAvailable falls below `floor_mib` (OutOfMemory)."""
    fes = Path(sys.executable).parent / "fedml-fes"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    with (folder / log_name).open("w") as log:
        proc = subprocess.Popen([str(fes), *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    total_pss, low, peak_server = 0, available_mib(), 0
    try:
        while proc.poll() is None:
            pids = _procs_under(folder)
            total_pss = max(total_pss, sum(_pss_kib(pid) for pid in pids))
            for pid in pids if server_role else []:
                try:
                    if server_role in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace(
                        "\0", " "
                    ):
                        peak_server = max(peak_server, _kib(pid, "VmHWM"))
                except (FileNotFoundError, ProcessLookupError):
                    pass
            low = min(low, available_mib())
            if low < floor_mib:
                raise OutOfMemory(f"{what}: MemAvailable fell to {low:.0f} MiB")
            time.sleep(0.25)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError((folder / log_name).read_text()[-3000:])
    with (folder / "run" / "metrics.csv").open() as f:
        return wall, list(csv.DictReader(f)), total_pss, low, peak_server


def run_mpirun(ranks: int, model: str, folder: Path, rounds: int, floor_mib: float) -> dict:
    """`fedml-fes mpirun -np RANKS` (1 server + RANKS-1 client workers, each playing its
    devices in turn), the same job with 2 devices per worker: round wall and memory."""
    workers = ranks - 1
    raw = scale_job(workers, model, folder, rounds)
    cf = folder / "mpi.yaml"
    cf.write_text(yaml.safe_dump(raw))
    run_dir = folder / "run"
    wall, metrics, total_pss, low, _ = follow_fes(
        ["mpirun", "-np", str(ranks), "--cf", str(cf), "--run-dir", str(run_dir)],
        folder,
        "mpirun.log",
        f"mpirun -np {ranks}",
        floor_mib,
    )
    return {
        "mpirun_ranks": ranks,
        **_round_walls(metrics, wall),
        "all_processes_pss_MiB": round(total_pss / 1024, 1),
        "per_process_pss_MiB": round(total_pss / 1024 / ranks, 1),
        "host_available_min_MiB": round(low),
        "test_acc": [float(r["test_acc"]) for r in metrics],
    }


def run_devices(devices: int, per_process: int, model: str, folder: Path, rounds: int, floor_mib: float) -> dict:
    """`fedml-fes cross-device-local` with DEVICES emulated devices, PER_PROCESS of them played
    by each device process (one model per process), FedML's cross-device server, mosquitto and
    a moto S3 endpoint on loopback: the same job, one client per device, every device in every
    round. Messages: the MQTT publishes of the devices and the server (`cross_device` stats)."""
    from fedml_fes_plugins.cross_silo.services import placeholder_services

    raw = scale_job(devices, model, folder, rounds)
    raw["data_args"]["client_num_in_total"] = devices
    raw["data_args"]["gold_labels"] = 2 * devices
    raw["comm_args"] = {
        "backend": "MQTT_S3_MNN",
        "silo_num": devices,
        "round_timeout_s": 600,
        "join_timeout_s": 900,
        "worker_timeout_s": 900,
        **placeholder_services(),
    }
    cf = folder / "devices.yaml"
    cf.write_text(yaml.safe_dump(raw))
    run_dir = folder / "run"
    cmd = ["cross-device-local", "--local-services", "--cf", str(cf), "--run-dir", str(run_dir)]
    cmd += ["--devices-per-process", str(per_process), "--timeout", "3000"]
    wall, metrics, total_pss, low, peak_server = follow_fes(
        cmd, folder, "launcher.log", f"{devices} devices", floor_mib, server_role="--role server"
    )
    from fedml_fes_plugins.cross_device.launch import transfer_stats

    stats = transfer_stats(run_dir, wall)
    processes = -(-devices // per_process) + 1
    return {
        "devices": devices,
        "devices_per_process": per_process,
        "processes": processes,
        **_round_walls(metrics, wall),
        "server_peak_rss_MiB": round(peak_server / 1024, 1),
        "all_processes_pss_MiB": round(total_pss / 1024, 1),
        "host_available_min_MiB": round(low),
        "fedml_rounds": stats.get("fedml_rounds"),
        "mqtt_messages": stats["mqtt_messages"],
        "mqtt_messages_per_fedml_round": round(stats["mqtt_messages"] / max(stats.get("fedml_rounds") or 1, 1), 1),
        "mqtt_bytes": stats["mqtt_bytes"],
        "bytes_up": stats["bytes_up"],
        "bytes_down": stats["bytes_down"],
        "test_acc": [float(r["test_acc"]) for r in metrics],
    }


def plot(results: list[dict], path: Path, devices: list[dict] | None = None) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = [r["silos"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    axes[0].plot(k, [r["round_wall_mean_s"] for r in results], "o-")
    axes[0].set_ylabel("round wall (s)")
    axes[1].plot(k, [r["server_peak_rss_MiB"] for r in results], "o-", label="server peak")
    axes[1].plot(k, [r["all_processes_pss_MiB"] / 10 for r in results], "s--", label="all processes (PSS / 10)")
    axes[1].set_ylabel("resident memory (MiB)")
    axes[1].legend(fontsize=7)
    axes[2].plot(k, [r["messages_per_round"] for r in results], "o-")
    axes[2].set_ylabel("messages per round")
    for d in devices or []:  # cross-device points: x = devices, messages = MQTT per FedML round
        n = d["devices"]
        axes[0].plot([n], [d["round_wall_mean_s"]], "r^", label=f"cross-device, {n} devices")
        axes[1].plot([n], [d["server_peak_rss_MiB"]], "r^")
        axes[2].plot([n], [d["mqtt_messages_per_fedml_round"]], "r^")
    if devices:
        axes[0].legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("silos (gRPC) / devices (red)")
        ax.set_xscale("log")
        ax.set_xticks(k + [d["devices"] for d in devices or []])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    fig.suptitle(
        "Cross-silo gRPC (mutual TLS) and cross-device MQTT + S3 (red) on one host (2 vCPUs), tiny BERT, bias-only FedCLS",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--silos", nargs="*", type=int, default=[3, 8, 16])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--out", default="benchmarks/results/cross_silo_scale.json")
    p.add_argument("--plot", default="docs/cross_silo_scale.png")
    p.add_argument("--floor-mib", type=float, default=1500, help="stop a run when MemAvailable falls below")
    p.add_argument("--mpirun-ranks", nargs="*", type=int, default=[], help="also `fedml-fes mpirun -np N`")
    p.add_argument("--devices", nargs="*", type=int, default=[], help="also cross-device with N emulated devices")
    p.add_argument("--devices-per-process", type=int, default=25, help="emulated devices one device process plays")
    p.add_argument("--append", action="store_true", help="add to the results already in --out")
    args = p.parse_args(argv)
    results, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="fes-scale-") as tmp:
        model = tiny_bert(Path(tmp) / "tiny-bert")
        for k in args.silos:
            if results:  # will K processes fit in what is free now, at the last run's size each?
                need = results[-1]["per_process_pss_MiB"] * (k + 1) * 1.2 + args.floor_mib
                if need > available_mib():
                    skipped.append(f"{k} silos: need ~{need:.0f} MiB, {available_mib():.0f} MiB available")
                    print("skipped:", skipped[-1], flush=True)
                    continue
            folder = Path(tmp) / f"k{k}"
            folder.mkdir()
            try:
                r = run_k(k, model, folder, args.rounds, args.floor_mib)
            except OutOfMemory as e:
                skipped.append(str(e))
                print("stopped:", e, flush=True)
                continue
            results.append(r)
            print(json.dumps(r), flush=True)
        mpi = []
        for n in args.mpirun_ranks:
            folder = Path(tmp) / f"mpi{n}"
            folder.mkdir()
            try:
                r = run_mpirun(n, model, folder, args.rounds, args.floor_mib)
            except OutOfMemory as e:
                skipped.append(str(e))
                continue
            mpi.append(r)
            print(json.dumps(r), flush=True)
        devices = []
        for n in args.devices:
            folder = Path(tmp) / f"dev{n}"
            folder.mkdir()
            try:
                r = run_devices(n, args.devices_per_process, model, folder, args.rounds, args.floor_mib)
            except OutOfMemory as e:
                skipped.append(str(e))
                continue
            devices.append(r)
            print(json.dumps(r), flush=True)
    if args.append and Path(args.out).is_file():
        old = json.loads(Path(args.out).read_text())
        results = old["results"] + results
        mpi = old.get("mpirun", []) + mpi
        devices = old.get("cross_device", []) + devices
        skipped = old.get("skipped", []) + skipped
    command = "python benchmarks/cross_silo_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.append and Path(args.out).is_file():
        command = old.get("commands", [old.get("command")]) + [command]
    out = {
        "commands": command if isinstance(command, list) else [command],
        "date": time.strftime("%Y-%m-%d"),
        "host": "2 vCPUs, 24 GiB shared with other jobs",
        "results": results,
        "mpirun": mpi,
        "cross_device": devices,
        "skipped": skipped,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.plot and results:
        plot(results, Path(args.plot), devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())

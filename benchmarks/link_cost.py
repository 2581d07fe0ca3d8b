"""The cost model's network term against a real, shaped link.

The emulated transfer time of a message is `bytes / bandwidth` (fedml_fes/cost/network.py,
bytes = the tensors' bytes, as client_costs.csv records them). Here the same bytes travel
between a FeS cross-silo server node (rank 0) and a silo node (rank 1) over FedML's real
transports, with mutual TLS, through a link of benchmarks/link_shaper.py capped at the given
bandwidth both ways: gRPC (the silo's link carries each message, one fresh TLS channel per
message, as FedML does) and MQTT_S3 (mosquitto + moto S3 on loopback; the silo reaches both
through its link, the server directly: a message down is the server's S3 upload and MQTT
publish, then the silo's MQTT delivery and S3 download over the link; up the other way).

Each message is timed from the sender's send to the receiver's handler (payload decoded),
`--reps` times per size and direction; the median is reported beside `bytes / bandwidth`.
Per link setting, time = overhead + bytes / effective bandwidth is fitted by least squares:
`overhead` is the per-message cost the bytes term leaves out (TLS handshake, HTTP/2 or
MQTT and S3 requests, round trips). A round for one silo is one message down (the global
trainable tensors) and one up (its update) of the same size.

    python benchmarks/link_cost.py --out benchmarks/results/link_cost.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from link_shaper import LinkShaper  # noqa: E402

MB = 1e6


def _config(folder: Path, rank: int, backend: str, comm: dict) -> Path:
    raw = {
        "common_args": {"training_type": "cross_silo", "output_dir": str(folder / "runs"), "torch_threads": 1},
        "data_args": {"dataset": "bbc_news", "client_num_in_total": 1},
        "model_args": {"model": "offline:all-MiniLM-L6-v2"},
        "train_args": {"method": "fedcls", "client_num_per_round": 1},
        "comm_args": {"backend": backend, "silo_num": 1, "run_id": "linkcost", **comm},
    }
    path = folder / f"rank{rank}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _tls_by_port(tls: dict) -> None:
    """FedML's paho client with a certificate per process, both in this process: the server
    node reaches the broker on its own port, the silo node through its link's port
    (`transport.use_tls_mqtt` sets one certificate per process)."""
    from fedml.core.distributed.communication.mqtt.mqtt_manager import MqttManager

    from fedml_fes_plugins.cross_silo.transport import serialize_tls_io

    original = getattr(MqttManager.init_connect, "fes_original", MqttManager.init_connect)

    def init_connect(self) -> None:
        original(self)
        files = tls[int(self._port)]
        self._client.tls_set(ca_certs=files.ca, certfile=files.cert, keyfile=files.key)
        serialize_tls_io(self._client)

    init_connect.fes_original = original
    MqttManager.init_connect = init_connect


class Pair:
    """A server node and a silo node of one backend, the silo behind `link`."""

    def __init__(self, backend: str, folder: Path, link, services: list):
        from fedml_fes_plugins.cross_silo.certs import broker_files, comm_keys, make_run_certs
        from fedml_fes_plugins.cross_silo.config import load_cross_silo
        from fedml_fes_plugins.cross_silo.node import QueuedCommManager
        from fedml_fes_plugins.cross_silo.services import free_port, mqtt_acl, start_mosquitto, start_s3
        from fedml_fes_plugins.cross_silo.transport import fedml_args, use_safe_s3_models

        certs = folder / "certs"
        make_run_certs(certs, 1)
        keys = comm_keys(certs)
        comm: dict[int, dict] = {}
        if backend == "GRPC":
            ports = {0: free_port(), 1: free_port()}
            view = {
                0: {0: ports[0], 1: link.forward(ports[1], "down")},
                1: {0: link.forward(ports[0], "up"), 1: ports[1]},
            }
            for rank in (0, 1):
                ip = folder / f"ip{rank}.csv"
                rows = ["eid,rank,grpc_server_ip,grpc_server_port"] + [
                    f"{r},{r},127.0.0.1,{view[rank][r]}" for r in (0, 1)
                ]
                ip.write_text("\n".join(rows) + "\n")
                comm[rank] = {"grpc_ipconfig_path": str(ip)}
        else:
            mq = start_mosquitto(folder / "mosquitto", tls=broker_files(certs), acl=mqtt_acl("linkcost", 0, {1: 1}))
            s3 = start_s3(folder / "s3")
            services += [mq, s3]
            silo_broker = link.forward(mq.port, "up")
            comm[0] = {"customized_training_mqtt_config": mq.config, "customized_training_s3_config": s3.config}
            comm[1] = {
                "customized_training_mqtt_config": {**mq.config, "BROKER_PORT": silo_broker},
                "customized_training_s3_config": {
                    **s3.config,
                    "CN_S3_ENDPOINT": f"http://127.0.0.1:{link.forward(s3.port, 'up')}",
                },
            }
            use_safe_s3_models()
            files = {r: load_cross_silo(_config(folder, r, backend, {**comm[r], **keys}))[1].tls(r) for r in (0, 1)}
            _tls_by_port({mq.port: files[0], silo_broker: files[1]})
        self.nodes = []
        for rank in (0, 1):
            cfg, settings = load_cross_silo(_config(folder, rank, backend, {**comm[rank], **keys}))
            node = QueuedCommManager(fedml_args(cfg, settings, rank), settings, rank)
            import threading

            threading.Thread(target=node._receive, daemon=True).start()
            self.nodes.append(node)
        time.sleep(1.0 if backend == "MQTT_S3" else 0.2)  # connected and subscribed
        for node in self.nodes:
            while node.next_message(0) is not None:
                pass

    def send(self, sender: int, nbytes: int, timeout_s: float = 120.0) -> float:
        from fedml_fes_plugins.cross_silo import protocol as p

        src, dst = self.nodes[sender], self.nodes[1 - sender]
        msg = src.message("fes_bench", 1 - sender, round_idx=0)
        msg.add_params(p.PAYLOAD, {"w": np.zeros(nbytes // 4, dtype=np.float32)})
        t0 = time.monotonic()
        if (err := src.send(msg)) is not None:
            raise RuntimeError(f"send failed: {err}")
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            got = dst.next_message(deadline - time.monotonic())
            if got is not None and got[0] == "fes_bench":
                if got[1].get(p.PAYLOAD) is None:
                    raise RuntimeError("the payload did not arrive")
                return time.monotonic() - t0
        raise RuntimeError("the message did not arrive")

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def fold(result: dict) -> dict:
    """The per-message overhead the cost model lacks, fitted as the model would use it: time =
    overhead + bytes / bandwidth with the link's nominal bandwidth, the overhead minimizing the
    squared relative error over every message (so small messages count as much as large
    ones); then each message's and each round's ratio with it folded in. Also the plain
    least-squares line (overhead and effective bandwidth), for reference."""
    mbps = result["MBps"]
    points = [(m["bytes"], t) for m in result["messages"] for t in m["measured_s"]]
    x = np.array([b for b, _ in points], dtype=float)
    y = np.array([t for _, t in points], dtype=float)
    over = float(np.sum((y - x / (mbps * MB)) / y**2) / np.sum(1 / y**2))
    slope, intercept = np.polyfit(x, y, 1)
    result["fit"] = {
        "message_overhead_s": round(max(over, 0.0), 4),
        "line_overhead_s": round(float(intercept), 4),
        "line_effective_MBps": round(float(1 / slope / MB), 3) if slope > 0 else None,
    }
    o = result["fit"]["message_overhead_s"]
    for r in result["messages"]:
        r["corrected_ratio"] = round(r["measured_median_s"] / (r["emulated_s"] + o), 3)
    for r in result["rounds"]:
        r["corrected_ratio"] = round(r["measured_s"] / (r["emulated_s"] + 2 * o), 3)
    return result


def measure(backend: str, mbps: float, latency_ms: float, sizes: list[int], reps: int) -> dict:
    from fedml_fes.cost.network import Network

    net = Network.symmetric(mbps)
    services: list = []
    shaper = LinkShaper()
    link = shaper.link("silo1", up_MBps=mbps, down_MBps=mbps, latency_s=latency_ms / 1e3)
    with tempfile.TemporaryDirectory(prefix="fes-linkcost-") as tmp:
        pair = Pair(backend, Path(tmp), link, services)
        try:
            pair.send(0, 1000)  # warm-up: connections, first-call costs
            pair.send(1, 1000)
            rows = []
            for nbytes in sizes:
                for direction, sender in (("down", 0), ("up", 1)):
                    times = []
                    for _ in range(reps):
                        before = sum(c.bytes[direction] for c in link.connections)
                        times.append(pair.send(sender, nbytes))
                        time.sleep(0.05)
                        wire = sum(c.bytes[direction] for c in link.connections) - before
                    emulated = (
                        net.transfer_seconds(nbytes, 0) if direction == "down" else net.transfer_seconds(0, nbytes)
                    )
                    median = statistics.median(times)
                    rows.append(
                        {
                            "bytes": nbytes,
                            "direction": direction,
                            "measured_s": [round(t, 4) for t in times],
                            "measured_median_s": round(median, 4),
                            "emulated_s": round(emulated, 4),
                            "ratio": round(median / emulated, 3),
                            "link_bytes_last": wire,
                        }
                    )
        finally:
            pair.close()
            for s in services:
                s.stop()
            shaper.close()
    rounds = []
    for nbytes in sizes:
        d = next(r for r in rows if r["bytes"] == nbytes and r["direction"] == "down")
        u = next(r for r in rows if r["bytes"] == nbytes and r["direction"] == "up")
        measured = d["measured_median_s"] + u["measured_median_s"]
        emulated = d["emulated_s"] + u["emulated_s"]
        rounds.append(
            {
                "bytes": nbytes,
                "measured_s": round(measured, 4),
                "emulated_s": round(emulated, 4),
                "ratio": round(measured / emulated, 3),
            }
        )
    return fold(
        {"backend": backend, "MBps": mbps, "latency_ms": latency_ms, "messages": rows, "rounds": rounds, "fit": {}}
    )


def markdown(results: list[dict]) -> str:
    """Per link setting: each size's measured median (down / up), bytes / bandwidth, the ratio
    without and with the fitted per-message overhead; then the per-round ratios."""
    lines = [
        "| backend | link | fitted overhead per message | size | measured down / up | bytes / bandwidth "
        "| ratio | ratio with the overhead | per round (down + up): ratio, with the overhead |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        link = f"{r['MBps']:g} MB/s, {r['latency_ms']:g} ms"
        for nbytes in sorted({m["bytes"] for m in r["messages"]}):
            d, u = (
                next(m for m in r["messages"] if m["bytes"] == nbytes and m["direction"] == x) for x in ("down", "up")
            )
            rd = next(x for x in r["rounds"] if x["bytes"] == nbytes)
            lines.append(
                f"| {r['backend']} | {link} | {r['fit']['message_overhead_s']:.3f} s | {nbytes / 1e3:,.0f} KB "
                f"| {d['measured_median_s']:.3f} / {u['measured_median_s']:.3f} s | {d['emulated_s']:.3f} s "
                f"| {d['ratio']:.2f} / {u['ratio']:.2f} | {d['corrected_ratio']:.2f} / {u['corrected_ratio']:.2f} "
                f"| {rd['ratio']:.2f}, {rd['corrected_ratio']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", nargs="+", default=["GRPC", "MQTT_S3"])
    p.add_argument("--mbps", nargs="+", type=float, default=[1.0, 10.0])
    p.add_argument("--latency-ms", nargs="+", type=float, default=[0.0])
    p.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000, 4_000_000])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/link_cost.json")
    p.add_argument("--table", metavar="JSON", help="print the markdown table of a results file and exit")
    p.add_argument("--refit", metavar="JSON", help="fit a results file's measurements again (in place) and exit")
    args = p.parse_args(argv)
    if args.refit:
        data = json.loads(Path(args.refit).read_text())
        data["results"] = [fold(r) for r in data["results"]]
        Path(args.refit).write_text(json.dumps(data, indent=1) + "\n")
    if args.table or args.refit:
        print(markdown(json.loads(Path(args.table or args.refit).read_text())["results"]))
        return 0
    logging.basicConfig(level=logging.ERROR)
    results = []
    for backend in args.backends:
        for latency in args.latency_ms:
            for mbps in args.mbps:
                r = measure(backend, mbps, latency, args.sizes, args.reps)
                results.append(r)
                print(
                    f"{backend} {mbps:g} MB/s {latency:g} ms: overhead {r['fit']['message_overhead_s']:.3f} s/message, "
                    f"line fit: effective {r['fit']['line_effective_MBps']} MB/s",
                    flush=True,
                )
                for row in r["messages"]:
                    print(
                        f"  {row['direction']:>4} {row['bytes']:>9,} B: measured {row['measured_median_s']:.3f} s, "
                        f"bytes/bandwidth {row['emulated_s']:.3f} s, ratio {row['ratio']:.2f} "
                        f"(with overhead {row['corrected_ratio']:.2f})",
                        flush=True,
                    )
    out = {
        "command": "python benchmarks/"
        + Path(__file__).name
        + " "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "host": "2 vCPUs shared with other jobs; every process and the link shaper on loopback",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

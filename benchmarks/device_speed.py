"""What a GPU buys the fidelity suite: the prompt model's two heavy loops, timed on each device
of one machine in one process, and the committed matrix's run time projected from them.

    python benchmarks/device_speed.py --devices cpu:1 cpu cuda [--model offline:smollm2-135m]

The loops are the project's own (prompt.classifier), at the shared config's settings
(run_configs/fidelity.yaml: SmolLM2, 64 tokens, precision auto): a full-tuning training step
(batch 4, AdamW over every weight, as FedFSL's clients train) and inference at batch 64 (the
labeler's pass over a client's pool, and the evaluator's). `cpu:1` is one thread, as each run of
the matrix computes; `cpu` all of the machine's threads. Every figure is a median over repeats
after a warm-up. Written: one JSON with each device's step time, texts per second and (CUDA)
peak memory.

With `--run-time benchmarks/results/run_time.md` the matrix's measured split (clients' training,
clients' labeling, the rest, per dataset and method) is projected onto the fastest device: its
training and labeling divided by that device's speed-up over `cpu:1`, the rest (evaluation,
aggregation, disk, the runtime) left as measured. It is a projection from two loops, not a run of
the matrix on that device, and says so in its output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from threads_precision import ROOT, bbc_texts, prompt_model, train_step  # noqa: E402


def measure(model_name: str, spec: str, steps: int, infer_texts: int) -> dict:
    """Train-step and inference timings of the prompt model on device `spec` (cpu: every core,
    cpu:N: N threads, cuda)."""
    import torch

    from fedml_fes.precision import autocast_for, describe_device, resolve_precision
    from fedml_fes.prompt.classifier import one_hot, predict_proba

    kind, _, threads = spec.partition(":")
    device = torch.device("cuda" if kind == "cuda" else "cpu")
    if kind == "cpu":
        torch.set_num_threads(int(threads) if threads else os.cpu_count() or 1)
    texts, classes = bbc_texts()
    model, adapter = prompt_model(model_name, classes)
    model.to(device)
    cast = autocast_for("auto", device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    y = one_hot([i % len(classes) for i in range(4)], len(classes))
    step: list[float] = []
    for r in range(steps + 1):  # step 0 warms up
        sync()
        t = time.perf_counter()
        train_step(
            model, adapter, texts[4 * r : 4 * r + 4], y, torch.Generator().manual_seed(r), cast, 5e-5, device=device
        )
        sync()
        if r:
            step.append(time.perf_counter() - t)
    pool = (texts * (infer_texts // len(texts) + 1))[:infer_texts]
    infer: list[float] = []
    for r in range(3):  # pass 0 warms up
        sync()
        t = time.perf_counter()
        predict_proba(model, adapter, pool, None, batch_size=64, device=device, autocast=cast)
        sync()
        if r:
            infer.append(time.perf_counter() - t)
    out = {
        "device": spec,
        "described": describe_device(device, "auto"),
        "precision": resolve_precision("auto", device),
        "train_step_s": round(statistics.median(step), 4),
        "infer_texts": infer_texts,
        "infer_texts_per_s": round(infer_texts / statistics.median(infer), 1),
    }
    if device.type == "cuda":
        out["cuda_peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    return out


def project(run_time_md: Path, base: dict, fast: dict) -> dict:
    """The matrix's measured split with training and labeling sped up as `fast` is over `base`."""
    train_x = base["train_step_s"] / fast["train_step_s"]
    infer_x = fast["infer_texts_per_s"] / base["infer_texts_per_s"]
    measured = projected = 0.0
    runs = 0
    row = re.compile(
        r"^\| \S+ \| \S+ \| (\d+) \| (\d+) \| (\d+) \(\d+%\) \| (\d+) \(\d+%\) \| (\d+) \(\d+%\) \| (\d+) \(\d+%\) \|$"
    )
    for line in run_time_md.read_text().splitlines():
        m = row.match(line)
        if not m:
            continue
        n, wall, outside, train, label, rest = (int(g) for g in m.groups())
        runs += n
        measured += n * wall
        projected += n * (outside + train / train_x + label / infer_x + rest)
    return {
        "runs": runs,
        "train_speedup": round(train_x, 1),
        "infer_speedup": round(infer_x, 1),
        "measured_run_time_h": round(measured / 3600, 2),
        "projected_run_time_h": round(projected / 3600, 2),
        "note": "projection: clients' training and labeling scaled by the two loops' speed-ups; "
        "loading, evaluation, aggregation and disk left as measured on the CPU",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="offline:smollm2-135m")
    p.add_argument("--devices", nargs="+", default=["cpu:1", "cpu"])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument(
        "--infer-texts",
        type=int,
        nargs="+",
        default=[128],
        help="texts per inference pass, one per device or one for all",
    )
    p.add_argument("--run-time", type=Path, help="benchmarks/results/run_time.md, to project the matrix's run time")
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/device_speed.json"))
    o = p.parse_args()
    import torch

    if any(d.startswith("cuda") for d in o.devices) and not torch.cuda.is_available():
        print("device_speed: --devices names cuda, but torch sees no CUDA device here", file=sys.stderr)
        return 1
    counts = o.infer_texts * len(o.devices) if len(o.infer_texts) == 1 else o.infer_texts
    results = []
    for spec, n in zip(o.devices, counts):
        r = measure(o.model, spec, o.steps, n)
        results.append(r)
        print(json.dumps(r), flush=True)
        Path(o.out).write_text(json.dumps({"devices": results}, indent=2) + "\n")  # kept if a later device fails
    report: dict = {
        "command": "benchmarks/device_speed.py " + " ".join(sys.argv[1:]),
        "model": o.model,
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "devices": results,
    }
    base = next((r for r in results if r["device"] == "cpu:1"), None)
    if o.run_time and base:
        fast = min(results, key=lambda r: r["train_step_s"])
        report["projection"] = {"onto": fast["device"], **project(o.run_time, base, fast)}
        print(json.dumps(report["projection"]))
    Path(o.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {o.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

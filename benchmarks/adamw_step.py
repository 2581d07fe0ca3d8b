"""A full-tuning training step with AdamW as torch's per-tensor loop (the default) against its
fused kernel (`train_args.fused_optimizer`), side by side in one process on one thread.

    .venv/bin/python benchmarks/adamw_step.py [--model offline:smollm2-135m] [--steps 6]

The project's own prompt model and loop (prompt.classifier.train_examples: batch 4, 64 tokens,
bfloat16 autocast where the CPU has it, AdamW stepped in the backward pass), BBC News texts.
Two copies of the model start from the same weights; each step runs the loop's copy, then the
fused copy, on the same batch, so load on the machine falls on both alike. Printed and written:
the median step time of each, their ratio, and how far the two copies' weights are apart after
the last step (float rounding, not a different update).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from threads_precision import ROOT, bbc_texts, prompt_model, train_step  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="offline:smollm2-135m")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/adamw_step.json"))
    o = p.parse_args()

    import torch

    from fedml_fes.precision import autocast_for
    from fedml_fes.prompt.classifier import one_hot

    torch.set_num_threads(1)
    texts, classes = bbc_texts()
    loop_model, adapter = prompt_model(o.model, classes)
    models = {False: loop_model, True: copy.deepcopy(loop_model)}
    cast = autocast_for("auto", torch.device("cpu"))
    y = one_hot([i % len(classes) for i in range(4)], len(classes))
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(o.steps + 1):  # step 0 warms up
        for fused, model in models.items():
            t = time.perf_counter()
            train_step(model, adapter, texts[4 * r : 4 * r + 4], y, torch.Generator().manual_seed(r), cast, 5e-5, fused)
            if r:
                times[fused].append(time.perf_counter() - t)
    apart = max((a - b).abs().max().item() for a, b in zip(models[False].parameters(), models[True].parameters()))
    loop_s, fused_s = (round(statistics.median(times[f]), 3) for f in (False, True))
    report = {
        "command": "benchmarks/adamw_step.py " + " ".join(sys.argv[1:]),
        "model": o.model,
        "date": time.strftime("%Y-%m-%d"),
        "trainable_weights_m": round(sum(p.numel() for p in loop_model.parameters() if p.requires_grad) / 1e6, 1),
        "steps": o.steps,
        "loop_step_s": loop_s,
        "fused_step_s": fused_s,
        "speedup": round(loop_s / fused_s, 2),
        "max_weight_difference": apart,
    }
    Path(o.out).write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"train step (batch 4, full tuning, one thread): loop {loop_s} s, fused {fused_s} s "
        f"({report['speedup']}x); weights apart after {o.steps + 1} steps: {apart:.2e}; written: {o.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

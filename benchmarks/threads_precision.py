"""Speed of the causal-LM prompt model on this machine: float32 against bfloat16 autocast, one
against two torch threads, and two processes side by side (the fidelity suite's --jobs 2).

    .venv/bin/python benchmarks/threads_precision.py [--model offline:smollm2-135m] [--out FILE.json]

One process measures a training step (batch 4, 64 tokens, AdamW over every weight, as FedFSL
trains) and inference over 32 texts (the pseudo-labeler's and evaluator's forward pass) at each
(precision, threads) setting; then two copies of the one-thread run start at once and each
reports its own times. Every figure is a median over repeats after a warm-up step, measured by
the project's own prompt model and loops (prompt.classifier), on BBC News texts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(model_name: str, precision: str, threads: int, repeats: int) -> dict:
    import torch

    from fedml_fes.precision import autocast_for
    from fedml_fes.prompt.classifier import one_hot, predict_proba

    torch.set_num_threads(threads)
    texts, classes = bbc_texts()
    model, adapter = prompt_model(model_name, classes)
    device = torch.device("cpu")
    cast = autocast_for(precision, device)
    gen = torch.Generator().manual_seed(0)
    y = one_hot([i % len(classes) for i in range(4)], len(classes))
    step: list[float] = []
    for r in range(repeats + 1):
        t = time.perf_counter()
        train_step(model, adapter, texts[4 * r : 4 * r + 4], y, gen, cast, lr=1e-5)
        if r:
            step.append(time.perf_counter() - t)
    infer: list[float] = []
    for r in range(max(2, repeats // 2) + 1):
        t = time.perf_counter()
        predict_proba(
            model, adapter, texts[100 + 32 * r : 132 + 32 * r], None, batch_size=32, device=device, autocast=cast
        )
        if r:
            infer.append(time.perf_counter() - t)
    return {
        "precision": precision,
        "threads": threads,
        "train_step_s": round(statistics.median(step), 3),
        "infer_32_s": round(statistics.median(infer), 3),
    }


def train_step(model, adapter, texts, y, generator, autocast, lr: float, fused: bool = False, device=None) -> None:
    """One full-tuning training step (on the CPU unless `device`): a batch of 4 texts, the project's own loop."""
    import torch

    from fedml_fes.prompt.classifier import train_examples

    train_examples(
        model,
        adapter,
        texts,
        None,
        y,
        epochs=1,
        batch_size=4,
        lr=lr,
        weight_decay=0.0,
        generator=generator,
        device=device or torch.device("cpu"),
        autocast=autocast,
        fused=fused,
    )


def prompt_model(model_name: str, classes: tuple[str, ...]):
    """The BBC News prompt model on a causal LM (pattern 0, 64 tokens) and its adapter."""
    from fedml_fes.models import build_causal_lm, load_tokenizer
    from fedml_fes.prompt.classifier import PromptAdapter
    from fedml_fes.prompt.model import PromptCausalLM, PromptEncoder
    from fedml_fes.prompt.pvp import get_pvp, verbalizer_token_ids

    tok = load_tokenizer(model_name)
    pvp = get_pvp("bbc_news")
    model = PromptCausalLM(build_causal_lm(model_name), verbalizer_token_ids(tok, pvp.verbalizer(0, True), classes))
    return model, PromptAdapter(PromptEncoder(tok, pvp.pattern(0, True), 64, causal=True))


def bbc_texts() -> tuple[list[str], tuple[str, ...]]:
    from fedml_fes.config import FesConfig
    from fedml_fes.data.sources import load_source

    splits = load_source(FesConfig())
    return list(splits.train.texts[:400]), tuple(splits.train.classes)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="offline:smollm2-135m")
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/threads_precision.json"))
    p.add_argument("--one", nargs=2, metavar=("PRECISION", "THREADS"), help=argparse.SUPPRESS)
    o = p.parse_args()
    if o.one:
        print(json.dumps(measure(o.model, o.one[0], int(o.one[1]), o.repeats)), flush=True)
        return 0

    def child(precision: str, threads: int) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--model",
                o.model,
                "--repeats",
                str(o.repeats),
                "--one",
                precision,
                str(threads),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )

    def result(proc: subprocess.Popen) -> dict:
        out, _ = proc.communicate()
        return json.loads(out.strip().splitlines()[-1])

    rows = []
    for precision in ("float32", "bfloat16"):
        for threads in (1, 2):
            r = result(child(precision, threads))
            r["processes"] = 1
            rows.append(r)
            print(r, flush=True)
        pair = [child(precision, 1), child(precision, 1)]
        for proc in pair:
            r = result(proc)
            r["processes"] = 2
            rows.append(r)
            print(r, flush=True)
    Path(o.out).write_text(json.dumps({"model": o.model, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))
    print(f"written: {o.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

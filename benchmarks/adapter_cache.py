"""The step time the activation cache saves below AutoFedNLP adapters / LoRA.

    .venv/bin/python benchmarks/adapter_cache.py                       # depths 2 and 4 of the MiniLM's 6
    .venv/bin/python benchmarks/adapter_cache.py --depths 4 --steps 8  # quicker

A local training step of the prompt model with PEFT modules in layers depth..5 of the offline
MiniLM, timed three ways on the same batches of one BBC News client's texts (the fidelity
settings: pattern 1, max_seq_length 64, batch 4, one thread):
  plain    no split: every step runs the whole encoder on the padded batch (the frozen bottom
           needs no backward, so autograd already skips it);
  no_cache the runtime with tuning_args.activation_cache false: the frozen bottom runs per
           example, unpadded and without autograd, at every step;
  cached   the runtime with the cache on: the bottom outputs were computed once (the fill,
           timed separately: a one-time cost per client and text) and every step runs only
           the top layers and the head.
Writes benchmarks/results/adapter_cache.json (medians over the timed steps, after warm-up).
The MLM head is freshly initialised (the timing does not depend on its weights).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedml_fes.config import AdapterConfig, load_config  # noqa: E402
from fedml_fes.data.federated import build_federated_data  # noqa: E402
from fedml_fes.models import build_masked_lm, load_tokenizer  # noqa: E402
from fedml_fes.prompt.model import PromptEncoder, PromptMLM  # noqa: E402
from fedml_fes.prompt.pvp import verbalizer_token_ids  # noqa: E402
from fedml_fes.runtime.methods import pvp_for  # noqa: E402
from fedml_fes.tuning.adapters import adapter_plan, add_adapters  # noqa: E402
from fedml_fes.tuning.params import payload_bytes, trainable_state  # noqa: E402
from fedml_fes.tuning.plan import num_layers  # noqa: E402
from fedml_fes.tuning.split import ActivationCache, FrozenBottom  # noqa: E402

CONFIG = ROOT / "run_configs" / "bbc_lora.yaml"


def _model(cfg, kind: str, depth: int, classes, tok) -> PromptMLM:
    pattern, verbalizer = pvp_for(cfg)
    model = PromptMLM(build_masked_lm(cfg.model.model, 0), verbalizer_token_ids(tok, verbalizer, classes))
    add_adapters(
        model.mlm, adapter_plan(AdapterConfig(depth=depth, width=cfg.adapter.width), kind, num_layers(model)), seed=0
    )
    model.freeze_vocab_bias()
    return model


def _steps(model: PromptMLM, batches: list[dict], epochs: int) -> list[float]:
    """Seconds per training step (forward, loss, backward, AdamW) over `epochs` passes."""
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    times = []
    for _ in range(epochs):
        for b in batches:
            start = time.perf_counter()
            logp = torch.log_softmax(model(b["input_ids"], b["attention_mask"], b["mask_pos"]), -1)
            loss = -logp[torch.arange(len(logp)), b["labels"]].mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
    return times


def measure(
    cfg, kind: str, depth: int, texts: list[str], labels: list[int], classes, tok, epochs: int, warmup: int
) -> dict:
    enc = PromptEncoder(tok, pvp_for(cfg)[0], cfg.model.max_seq_length)
    bs = cfg.train.batch_size
    batches = []
    for i in range(0, len(texts), bs):
        b = enc.batch(texts[i : i + bs], None)
        b["labels"] = torch.tensor(labels[i : i + bs])
        batches.append(b)
    out: dict = {"kind": kind, "depth": depth, "layers_adapted": f"{depth}-5", "steps_timed": 0}
    for mode in ("plain", "no_cache", "cached"):
        model = _model(cfg, kind, depth, classes, tok)
        out["payload_bytes"] = payload_bytes(trainable_state(model))
        if mode != "plain":
            model.split = FrozenBottom(model.mlm.base_model, depth)
        if mode == "cached":
            model.split.cache = ActivationCache()
            start = time.perf_counter()
            for b in batches:
                model.fill_cache(b["input_ids"], b["attention_mask"])
            out["fill_ms_per_example"] = 1e3 * (time.perf_counter() - start) / len(texts)
        times = _steps(model, batches, epochs)[warmup:]
        out[f"{mode}_ms_per_step"] = 1e3 * statistics.median(times)
        out["steps_timed"] = len(times)
    out["saving_vs_no_cache"] = out["no_cache_ms_per_step"] / out["cached_ms_per_step"]
    out["saving_vs_plain"] = out["plain_ms_per_step"] / out["cached_ms_per_step"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--depths", type=int, nargs="+", default=[2, 4], help="first adapted layer (of 6)")
    p.add_argument("--kinds", nargs="+", default=["lora", "adapter"])
    p.add_argument("--steps", type=int, default=16, help="batches per epoch (batch_size examples each)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=4, help="steps left out of the median")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "adapter_cache.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(CONFIG)
    data, _ = build_federated_data(cfg)
    client = max(data.clients, key=lambda c: len(c.unlabeled))
    texts = list(client.unlabeled.texts)[: args.steps * cfg.train.batch_size]
    labels = [i % len(data.classes) for i in range(len(texts))]  # the step time does not depend on them
    tok = load_tokenizer(cfg.model.model)
    rows = []
    for depth in args.depths:
        for kind in args.kinds:
            row = measure(cfg, kind, depth, texts, labels, data.classes, tok, args.epochs, args.warmup)
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
            rows.append(row)
    result = {
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "torch_threads": args.threads,
            "machine": platform.machine(),
            "torch": torch.__version__,
            "load_avg_1m": os.getloadavg()[0],
        },
        "model": cfg.model.model,
        "max_seq_length": cfg.model.max_seq_length,
        "batch_size": cfg.train.batch_size,
        "width": cfg.adapter.width,
        "examples": len(texts),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

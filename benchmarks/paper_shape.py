"""Training memory and step time of FedFSL, FedFSL-BIAS and FeS on the paper's architecture.

The paper's memory figures (FedFSL 10.4 GB, FedFSL-BIAS 5.8 GB, FeS 2.3 GB: 4.5x) are for
RoBERTa-large, whose weights cannot be loaded offline. A training step's memory and time
depend on the model's shapes, not on its weights, so this builds RoBERTa-large's shape (24
layers, hidden 1024, 16 heads, FFN 4096, vocabulary 50,265) with random weights, wraps it in
the project's own prompt model (`PromptMLM`, 4 verbalizer words) and trains it the way each
method does, through the project's own code: `apply_tuning` (every weight / every bias / FeS's
plan from `plan_for`, the top third bias-only), `FrozenBottom` with its activation cache filled
before the first step (FeS), AdamW, batch 4, length 256 (the paper's training settings).

Per method it prints and writes (JSON):
- `cuda_peak_bytes`: torch.cuda.max_memory_allocated over the cache fill and the steps, with
  the whole model resident on the GPU;
- for FeS also `cuda_peak_bottom_dropped_bytes`: the same steps after the frozen layers and
  the embeddings (but the word-embedding matrix, tied to the MLM decoder) leave the GPU once
  the cache is filled (what the cache makes possible: no training step reads them);
- `analytic_peak_bytes`: the project's own measurement (`cost.meter.TaskMeter`: parameters a
  step reads + gradients + AdamW state + saved activations), the figure every run reports;
- `step_s`: median wall time of one training step (forward, backward, AdamW), after warm-up.

    python benchmarks/paper_shape.py --out runs/paper_shape.json              # roberta-large shape, GPU if any
    python benchmarks/paper_shape.py --shape tiny --steps 2 --out /tmp/t.json  # seconds, on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import RobertaConfig, RobertaForMaskedLM

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedml_fes.cost.meter import TaskMeter  # noqa: E402
from fedml_fes.prompt.model import PromptMLM  # noqa: E402
from fedml_fes.tuning.plan import apply_tuning, num_layers, plan_for  # noqa: E402
from fedml_fes.tuning.split import ActivationCache, FrozenBottom  # noqa: E402

SHAPES = {
    # roberta-large's config.json (the sizes that decide memory and time)
    "roberta-large": dict(
        num_hidden_layers=24,
        hidden_size=1024,
        num_attention_heads=16,
        intermediate_size=4096,
        vocab_size=50265,
        max_position_embeddings=514,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ),
    # a few-second check of the script itself
    "tiny": dict(
        num_hidden_layers=6,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=300,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ),
}
METHODS = ("fedfsl", "fedfsl_bias", "fes")
VERBALIZER = [100, 200, 300, 400]  # four class words (AG News has four classes)


def build(shape: str, method: str, seed: int) -> PromptMLM:
    """The prompt model with the method's trainable set, as `FewShot.build_model` sets it."""
    torch.manual_seed(seed)
    model = PromptMLM(RobertaForMaskedLM(RobertaConfig(**SHAPES[shape])), VERBALIZER)
    plan = plan_for(num_layers(model), 0, -1) if method == "fes" else None
    apply_tuning(model, {"fedfsl": "full", "fedfsl_bias": "bias", "fes": "plan"}[method], plan)
    model.freeze_vocab_bias()
    if plan is not None and plan.frozen_bottom:
        model.split = FrozenBottom(model.mlm.base_model, plan.frozen_bottom)
        model.split.cache = ActivationCache()
    return model


def batches(n: int, batch: int, seq: int, vocab: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Full-length random batches: every example `seq` tokens, the mask in the middle."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        ids[:, 0], ids[:, -1] = 0, 2
        out.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones(batch, seq, dtype=torch.long),
                "mask_pos": torch.full((batch,), seq // 2),
                "y": torch.randint(0, len(VERBALIZER), (batch,), generator=g),
            }
        )
    return out


def drop_bottom(model: PromptMLM, to: str = "cpu") -> None:
    """Move the frozen layers and the embeddings off the GPU: a filled cache means no step reads
    them. The word-embedding matrix stays: RoBERTa's MLM decoder is tied to it and the prompt's
    logits read its verbalizer rows (an upper bound: a device needs only those rows)."""
    base, b = model.mlm.base_model, model.split.b
    for name, module in base.embeddings.named_children():
        if name != "word_embeddings":
            module.to(to)
    for layer in list(base.encoder.layer)[:b]:
        layer.to(to)


def train_steps(model: PromptMLM, data: list[dict], device: torch.device, lr: float) -> list[float]:
    """Cache fill (FeS), then one AdamW step per batch, as `prompt.classifier.train_examples` does."""
    if model.caches_bottom:
        for b in data:
            model.fill_cache(b["input_ids"].to(device), b["attention_mask"].to(device))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    times = []
    for b in data:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        logits = model(b["input_ids"].to(device), b["attention_mask"].to(device), b["mask_pos"].to(device))
        loss = torch.nn.functional.cross_entropy(logits, b["y"].to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def measure(shape: str, method: str, device: torch.device, steps: int, batch: int, seq: int, seed: int) -> dict:
    vocab = SHAPES[shape]["vocab_size"]
    data = batches(steps, batch, seq, vocab, seed)
    model = build(shape, method, seed).to(device)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    with TaskMeter(model, device) as meter:
        times = train_steps(model, data, device, lr=1e-5)
    m = meter.metrics()
    row = {
        "method": method,
        "params": params,
        "trainable_params": trainable,
        "analytic_peak_bytes": m["cost_peak_train_bytes"],
        "cuda_peak_bytes": m["cost_cuda_peak_bytes"],
        "step_s": statistics.median(times[1:] or times),
        "steps": steps,
    }
    if method == "fes" and device.type == "cuda":  # the same steps again, with the bottom off the GPU
        drop_bottom(model)  # the cache is filled: the steps below never run the bottom
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        train_steps(model, data, device, lr=1e-5)
        row["cuda_peak_bottom_dropped_bytes"] = int(torch.cuda.max_memory_allocated(device))
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="roberta-large")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when available)")
    p.add_argument("--steps", type=int, default=6, help="training steps per method (the first is warm-up)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON file for the rows")
    a = p.parse_args(argv)
    if a.steps < 1 or a.batch < 1 or a.seq < 4:
        p.error("--steps and --batch must be >= 1 and --seq >= 4")
    if a.seq > SHAPES[a.shape]["max_position_embeddings"] - 2:
        p.error(f"--seq {a.seq} is longer than {a.shape}'s positions allow")
    device = torch.device(
        "cuda" if a.device == "auto" and torch.cuda.is_available() else ("cpu" if a.device == "auto" else a.device)
    )
    rows = []
    for method in a.methods:
        row = measure(a.shape, method, device, a.steps, a.batch, a.seq, a.seed)
        rows.append(row)
        gb = 1e9
        extra = (
            f", bottom dropped {row['cuda_peak_bottom_dropped_bytes'] / gb:.2f} GB"
            if "cuda_peak_bottom_dropped_bytes" in row
            else ""
        )
        print(
            f"{method:12s} trainable {row['trainable_params']:>11,} of {row['params']:,}  analytic peak "
            f"{row['analytic_peak_bytes'] / gb:.2f} GB  CUDA peak {row['cuda_peak_bytes'] / gb:.2f} GB{extra}  "
            f"step {row['step_s'] * 1e3:.1f} ms",
            flush=True,
        )
    info = {
        "shape": a.shape,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch": a.batch,
        "seq": a.seq,
        "rows": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Records what one client task computed, from the calls the model actually made.

Forward hooks on the model and on its encoder see every pass with its real shapes: the
padded batch width, how many layers ran (the frozen-bottom split swaps the layer list per
call, so a cached bottom simply never shows up), whether autograd is on and which layers
train. That gives the FLOPs of exactly what ran, for any method, without touching the
training code; the numbers are the same in every runtime because they depend on shapes only.
PEFT LoRA modules in a layer (the `adapter` and `lora` methods) are counted as what they
are: their own small matrices' forward and gradients, the frozen base matrices beside them
paying activation gradients only (see `flops`).
Memory is measured alongside (see `memory`). Hooks read, never change, tensors.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .flops import (
    ATTENTION_OUTPUT,
    FFN_IN,
    FFN_OUT,
    QKV,
    EncoderShape,
    LoraShape,
    backward_flops,
    forward_flops,
    head_flops,
    lora_backward_flops,
    lora_forward_flops,
    lowest_layer_unused,
)
from .memory import ADAM_STATE_TENSORS, ParameterReads, SavedTensorMeter, parameter_bytes
from .profiles import UPDATE_PASSES


def find_encoder(model: nn.Module) -> nn.Module | None:
    """The base model inside `model` whose calls are counted: BERT/RoBERTa-style (`embeddings`
    and `encoder.layer`) or a Llama-style decoder stack (`embed_tokens` and `layers`)."""
    for m in model.modules():
        enc = getattr(m, "encoder", None)
        if hasattr(m, "embeddings") and enc is not None and hasattr(enc, "layer") and hasattr(m, "config"):
            return m
        if (
            hasattr(m, "embed_tokens")
            and isinstance(getattr(m, "layers", None), nn.ModuleList)
            and hasattr(m, "config")
        ):
            return m
    return None


def layers_of(base: nn.Module) -> nn.ModuleList:
    """The transformer layers of a base model found by `find_encoder`."""
    enc = getattr(base, "encoder", None)
    return enc.layer if enc is not None and hasattr(enc, "layer") else base.layers


def embeddings_of(base: nn.Module) -> nn.Module:
    return base.embeddings if hasattr(base, "embeddings") else base.embed_tokens


def head_width(model: nn.Module) -> int:
    """Classes the head scores: verbalizer words (prompt model) or classifier outputs."""
    ids = getattr(model, "verbalizer_ids", None)
    if ids is not None:
        return int(len(ids))
    if hasattr(model, "classifier"):
        return int(getattr(model.config, "num_labels", 0))
    return 0


@dataclass(frozen=True)
class _LayerInfo:
    lowest_trainable: int | None  # index (in the list that ran) of the lowest layer with a trainable tensor
    weight_layers: int  # layers whose own matrices train (LoRA matrices not counted: see `lora`)
    lora: tuple[tuple[LoraShape, ...], ...] = ()  # per layer, its active LoRA modules; () when none has any
    first_stage: int = QKV  # where the lowest trainable layer's lowest trainable tensor sits


def _stage(name: str) -> int:
    """Where the linear `name` (inside a layer) sits: BERT/RoBERTa/ELECTRA, DeBERTa, DistilBERT names."""
    last = name.rsplit(".", 1)[-1]
    if name.endswith("attention.output.dense") or last == "out_lin":
        return ATTENTION_OUTPUT
    if name.endswith("intermediate.dense") or last == "lin1":
        return FFN_IN
    if name.endswith("output.dense") or last == "lin2":
        return FFN_OUT
    return QKV  # Q/K/V, and anything not recognised: as if it read the layer's input


def _lora_modules(layer: nn.Module) -> tuple[list[LoraShape], set[int]]:
    """The layer's active PEFT LoRA modules (vanilla LoRA: x A^T B^T beside the base linear), and
    the ids of all LoRA tensors in it, active or not."""
    found: list[LoraShape] = []
    ids: set[int] = set()
    for name, m in layer.named_modules():
        a, b = getattr(m, "lora_A", None), getattr(m, "lora_B", None)
        if not (isinstance(a, nn.ModuleDict) and isinstance(b, nn.ModuleDict)):
            continue
        ids.update(id(p) for p in a.parameters())
        ids.update(id(p) for p in b.parameters())
        if getattr(m, "merged", False) or getattr(m, "disable_adapters", False):
            continue  # the base linear alone runs
        for key in getattr(m, "active_adapters", list(a.keys())):
            if key in a and key in b:
                wa, wb = a[key].weight, b[key].weight  # (r, in), (out, r)
                found.append(
                    LoraShape(
                        int(wa.shape[1]),
                        int(wa.shape[0]),
                        int(wb.shape[0]),
                        _stage(name),
                        wa.requires_grad,
                        wb.requires_grad,
                    )
                )
    return found, ids


def _layer_info(layers: nn.ModuleList) -> _LayerInfo:
    lowest = None
    weights = 0
    first = QKV
    lora: list[tuple[LoraShape, ...]] = []
    for i, layer in enumerate(layers):
        modules, lora_ids = _lora_modules(layer)
        lora.append(tuple(modules))
        params = list(layer.parameters())
        if lowest is None and any(p.requires_grad for p in params):
            lowest = i
            others = any(p.requires_grad and id(p) not in lora_ids for p in params)
            trained = [m.stage for m in modules if m.trains]
            first = QKV if others or not trained else min(trained)
        weights += any(p.requires_grad and p.dim() == 2 and id(p) not in lora_ids for p in params)
    return _LayerInfo(lowest, weights, tuple(lora) if any(lora) else (), first)


class TaskMeter:
    """Context manager around one client task; `metrics()` gives the `cost_*` floats it measured."""

    def __init__(self, model: nn.Module, device: torch.device | None = None, measure_memory: bool = True):
        self.model = model
        self.device = device
        self.measure_memory = measure_memory
        self.encoder = find_encoder(model)
        self.shape = EncoderShape.of(self.encoder.config) if self.encoder is not None else None
        self.classes = head_width(model)
        self.fwd = self.bwd = 0.0
        self.steps = self.examples = self.encoder_calls = self.updates = 0
        self.tokens = self.bottom_tokens = 0
        self.param_bytes = self.trainable_bytes = 0
        self.cuda_peak = 0
        self.cpu_s = 0.0  # CPU time of this process over the task (all its threads)
        self._cpu_start = 0.0
        self._info: dict[tuple[int, ...], _LayerInfo] = {}
        self._embeddings_train = False
        self._saved: SavedTensorMeter | None = None
        # parameters read: the first training forward ("train") and the first frozen-bottom pass ("fill")
        self._reads: ParameterReads | None = None
        self._phases: list[str | None] = []
        self._in_train_window = self._in_bottom_window = False
        self._train_started = self._interleaved = False
        self._stack = contextlib.ExitStack()

    # ---- hooks ------------------------------------------------------------------------------
    def _on_model(self, _module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = kwargs.get("input_ids", args[0] if args else None)
        if not isinstance(x, torch.Tensor) or self.shape is None:
            return
        b = int(x.shape[0])
        self.steps += 1
        self.examples += b
        head = head_flops(self.shape.hidden, self.classes, b) if self.classes else 0.0
        self.fwd += head
        if torch.is_grad_enabled() and self.trainable_bytes:
            self.bwd += 2 * head
            self.updates += 1  # one optimizer step per training batch
            if not self._train_started:
                self._train_started = self._in_train_window = True
                self._push("train")

    def _after_model(self, *_: Any) -> None:
        if self._in_train_window:
            self._in_train_window = False
            self._pop()

    def _push(self, phase: str | None) -> None:
        """Record parameter reads into `phase` until the matching `_pop` (None: not at all)."""
        if self._reads is None:
            return
        if not self._phases:
            self._reads.__enter__()
        self._phases.append(self._reads.phase)
        self._reads.phase = phase

    def _pop(self) -> None:
        if self._reads is None or not self._phases:
            return
        self._reads.phase = self._phases.pop()
        if not self._phases:
            self._reads.__exit__(None, None, None)

    def _after_encoder(self, *_: Any) -> None:
        if self._in_bottom_window:
            self._in_bottom_window = False
            self._pop()

    def _on_encoder(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        ref = ids if isinstance(ids, torch.Tensor) else embeds
        if not isinstance(ref, torch.Tensor):
            return
        b, w = int(ref.shape[0]), int(ref.shape[1])
        layers = layers_of(module)
        n = len(layers)
        key = tuple(id(layer) for layer in layers)
        info = self._info.get(key)
        if info is None:
            info = self._info[key] = _layer_info(layers)
        bottom = isinstance(ids, torch.Tensor) and n < self.shape.layers  # the frozen bottom of a split
        input_grad = self._embeddings_train if isinstance(ids, torch.Tensor) else bool(embeds.requires_grad)
        t, sq = b * w, b * w * w
        self.encoder_calls += 1
        self.fwd += forward_flops(self.shape, t, sq, n)
        if info.lora:
            self.fwd += lora_forward_flops([m for modules in info.lora for m in modules], t)
        if bottom:
            self.bottom_tokens += t
            self._interleaved |= self._train_started
            if self._reads is not None and ("fill" not in self._reads.books or self._phases):
                # the first bottom pass is the fill phase; later ones inside a training window are not the step's
                self._in_bottom_window = True
                self._push(None if "fill" in self._reads.books else "fill")
        else:
            self.tokens += t
        grad = torch.is_grad_enabled() and (input_grad or info.lowest_trainable is not None)
        if grad and not bottom:
            if self._saved is not None:
                self._saved.start_pass()  # a new training step: activations of the last one are gone
            grad_layers = n if input_grad else n - info.lowest_trainable
            self.bwd += backward_flops(self.shape, t, sq, grad_layers, info.weight_layers, input_grad)
            if info.lora:
                first = -1 if input_grad else info.first_stage
                self.bwd += lora_backward_flops(t, info.lora[n - grad_layers :], first) - lowest_layer_unused(
                    self.shape, t, sq, first
                )

    # ---- context ----------------------------------------------------------------------------
    def __enter__(self) -> "TaskMeter":
        self._cpu_start = time.process_time()
        self.param_bytes, self.trainable_bytes, storages = parameter_bytes(self.model)
        if self.encoder is None:
            return self
        self._embeddings_train = any(p.requires_grad for p in embeddings_of(self.encoder).parameters())
        self._stack.callback(self.model.register_forward_pre_hook(self._on_model, with_kwargs=True).remove)
        self._stack.callback(self.model.register_forward_hook(self._after_model).remove)
        self._stack.callback(self.encoder.register_forward_pre_hook(self._on_encoder, with_kwargs=True).remove)
        self._stack.callback(self.encoder.register_forward_hook(self._after_encoder).remove)
        if self.measure_memory:
            self._saved = SavedTensorMeter(storages)
            self._stack.enter_context(self._saved.recording())
            self._reads = ParameterReads()
            self._stack.callback(self._close_reads)
        if self._cuda():
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
        self.cpu_s = time.process_time() - self._cpu_start
        if self._cuda():
            self.cuda_peak = int(torch.cuda.max_memory_allocated(self.device))

    def _close_reads(self) -> None:
        """A forward that raised never ran its post-hook: leave no recording mode behind."""
        while self._phases:
            self._pop()

    def _cuda(self) -> bool:
        return self.device is not None and self.device.type == "cuda" and torch.cuda.is_available()

    # ---- result -----------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        trained = self.bwd > 0
        activations = self._saved.peak if self._saved is not None else 0
        grads = self.trainable_bytes if trained else 0
        optimizer = ADAM_STATE_TENSORS * self.trainable_bytes if trained else 0
        reads = self._reads
        if reads is not None and "train" in reads.books:
            resident = reads.bytes("train", "fill") if self._interleaved else reads.bytes("train")
            fill_peak = 0 if self._interleaved else reads.bytes("fill")
        else:  # not recorded (no encoder found, memory not measured): the whole model
            resident, fill_peak = self.param_bytes, 0
        measured = trained and self.measure_memory
        step_peak = resident + grads + optimizer + activations if measured else 0
        peak = max(step_peak, fill_peak) if measured else 0
        return {
            "cost_fwd_flops": float(self.fwd),
            "cost_bwd_flops": float(self.bwd),
            "cost_steps": float(self.steps),
            "cost_examples": float(self.examples),
            "cost_update_bytes": float(UPDATE_PASSES * self.trainable_bytes * self.updates),
            "cost_encoder_calls": float(self.encoder_calls),
            "cost_tokens": float(self.tokens),
            "cost_bottom_tokens": float(self.bottom_tokens),
            "cost_param_bytes": float(self.param_bytes),
            "cost_trainable_bytes": float(self.trainable_bytes),
            "cost_resident_param_bytes": float(resident if measured else 0),
            "cost_fill_peak_bytes": float(fill_peak if measured else 0),
            "cost_activation_peak_bytes": float(activations),
            "cost_grad_bytes": float(grads),
            "cost_optimizer_bytes": float(optimizer),
            "cost_peak_train_bytes": float(peak),
            "cost_cuda_peak_bytes": float(self.cuda_peak),
            "cost_cpu_s": float(self.cpu_s),
        }

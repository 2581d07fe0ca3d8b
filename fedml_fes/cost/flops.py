"""Matrix-multiply FLOPs of a transformer encoder pass, from its geometry and the shapes run.

Counted like `torch.utils.flop_counter` counts them (2 FLOPs per multiply-add, matmuls
only; layer norms, softmax, GELU and embedding lookups are left to the device's effective
throughput). For one layer on a batch of B sequences padded to width W, T = B*W tokens,
hidden h and feed-forward width i:

    forward   2*T*(4h^2 + 2hi)            Q, K, V, output projections and the feed-forward
            + 4*B*W^2*h                   scores Q K^T and the weighted sum A V
    backward  activation gradients through every layer from the lowest trainable one up:
              2*T*(4h^2 + 2hi) + 10*B*W^2*h   (flash-style attention recomputes the scores;
              minus 2*T*3h^2 in the lowest layer when its input needs no gradient)
            + weight gradients 2*T*(4h^2 + 2hi) for layers whose matrices train

Bias-only layers (BitFit) pay the activation gradients but no weight gradients; layers
below the lowest trainable one pay no backward at all, and a frozen bottom served from
the activation cache pays nothing in that pass.

LoRA modules (PEFT's, the `adapter` and `lora` methods) beside a frozen linear in -> out,
rank r: forward 2*T*r*(in+out) on top of the frozen matrix's; in a layer that gets gradients,
weight gradients 2*T*r*(in+out) for A and B and activation gradients 2*T*r*(in+out) through
the LoRA path (B's input, then A's input: 2*T*in*r of it is left out where A's input needs no
gradient). The frozen base matrices pay no weight gradient, only their activation gradients,
as in a bias-only layer. When the lowest trainable tensor of the lowest layer sits above its
Q/K/V projections (an adapter at the FFN output), autograd stops there: the activation
gradients below it in that layer are not computed (`lowest_layer_unused`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import FesError

# decoder families whose feed-forward is gated (gate, up and down projections: three matrices)
GATED_FFN = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo", "phi3"})


@dataclass(frozen=True)
class EncoderShape:
    """What FLOPs depend on: hidden size, feed-forward width and depth; for decoders also the
    key/value width (grouped-query attention: fewer K/V heads) and a gated feed-forward."""

    hidden: int
    intermediate: int
    layers: int
    kv: int = 0  # width of the K and V projections; 0: hidden (BERT's multi-head attention)
    gated: bool = False  # three feed-forward matrices (Llama's SwiGLU) instead of two

    @staticmethod
    def of(config) -> "EncoderShape":
        """From an HF config (BERT/RoBERTa names; DistilBERT's dim/hidden_dim/n_layers; Llama-style
        decoders' num_key_value_heads and gated MLP)."""
        h = getattr(config, "hidden_size", None) or getattr(config, "dim", None)
        i = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None)
        n = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None)
        if not (h and i and n):
            raise FesError(f"cannot read hidden/intermediate sizes and depth from {type(config).__name__}")
        heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
        head_dim = getattr(config, "head_dim", None) or (int(h) // int(heads) if heads else 0)
        kv = int(kv_heads) * int(head_dim) if kv_heads and head_dim else 0
        gated = getattr(config, "model_type", "") in GATED_FFN
        return EncoderShape(int(h), int(i), int(n), kv if kv != int(h) else 0, gated)

    @property
    def qkv(self) -> int:
        """Output width of the Q, K and V projections together."""
        return self.hidden + 2 * (self.kv or self.hidden)


def layer_linear_flops(shape: EncoderShape, tokens: float) -> float:
    """Forward FLOPs of one layer's projections (Q, K, V, output) and feed-forward on `tokens` tokens."""
    h, i = shape.hidden, shape.intermediate
    return 2.0 * tokens * (h * shape.qkv + h * h + (3 if shape.gated else 2) * h * i)


def forward_flops(shape: EncoderShape, tokens: float, sq_tokens: float, layers: int) -> float:
    """`layers` layers on T tokens; sq_tokens = sum over sequences of W^2 (B*W^2 when padded)."""
    return layers * (layer_linear_flops(shape, tokens) + 4.0 * sq_tokens * shape.hidden)


def backward_flops(
    shape: EncoderShape, tokens: float, sq_tokens: float, grad_layers: int, weight_layers: int, input_grad: bool
) -> float:
    """Backward of a pass whose top `grad_layers` layers get activation gradients.

    `weight_layers` of them train their matrices; `input_grad`: the gradient also flows
    below the lowest of them (trainable embeddings), so its Q/K/V input gradient is computed.
    """
    if grad_layers <= 0:
        return 0.0
    lin = layer_linear_flops(shape, tokens)
    act = grad_layers * (lin + 10.0 * sq_tokens * shape.hidden)
    if not input_grad:
        act -= 2.0 * tokens * shape.qkv * shape.hidden
    return act + weight_layers * lin


# where a linear sits in an encoder layer, in forward order (BERT-style layer)
QKV, ATTENTION_OUTPUT, FFN_IN, FFN_OUT = 0, 1, 2, 3


@dataclass(frozen=True)
class LoraShape:
    """One active LoRA module: rank `rank` beside a frozen linear `inputs` -> `outputs` at `stage`."""

    inputs: int
    rank: int
    outputs: int
    stage: int  # QKV, ATTENTION_OUTPUT, FFN_IN or FFN_OUT
    a_trains: bool
    b_trains: bool

    @property
    def trains(self) -> bool:
        return self.a_trains or self.b_trains


def lora_forward_flops(modules: Sequence[LoraShape], tokens: float) -> float:
    """Forward of the LoRA paths (x A^T, then B) of `modules` on T tokens each."""
    return 2.0 * tokens * sum(m.rank * (m.inputs + m.outputs) for m in modules)


def lora_backward_flops(tokens: float, layers: Sequence[Sequence[LoraShape]], first_stage: int) -> float:
    """Backward of the LoRA modules in the layers that get activation gradients (`layers`, lowest first).

    Per module: weight gradients of A (T*in*r) and B (T*r*out) where they train; B's input
    gradient where A trains or A's input needs a gradient; A's input gradient where A's
    input needs one: in every layer but the lowest, and in the lowest for modules above
    `first_stage` (the stage of its lowest trainable tensor; -1: the layer's input needs a
    gradient too). 2 FLOPs per multiply-add.
    """
    total = 0
    for k, modules in enumerate(layers):
        for m in modules:
            x_grad = k > 0 or m.stage > first_stage
            total += m.inputs * m.rank if m.a_trains else 0
            total += m.rank * m.outputs if m.b_trains else 0
            total += m.rank * m.outputs if (m.a_trains or x_grad) else 0
            total += m.inputs * m.rank if x_grad else 0
    return 2.0 * tokens * total


def lowest_layer_unused(shape: EncoderShape, tokens: float, sq_tokens: float, stage: int) -> float:
    """Activation gradients `backward_flops` counts in the lowest layer (input needing no gradient)
    that autograd does not compute when that layer's lowest trainable tensor sits at `stage`:
    above the attention output projection nothing below it in the layer needs a gradient."""
    h, i = shape.hidden, shape.intermediate
    unused = 0.0
    if stage >= ATTENTION_OUTPUT:  # its input gradient and the attention's backward
        unused += 2.0 * tokens * h * h + 10.0 * sq_tokens * h
    if stage >= FFN_IN:  # the FFN input projection's input gradient
        unused += 2.0 * tokens * h * i
    if stage >= FFN_OUT:  # the FFN output projection's input gradient
        unused += 2.0 * tokens * i * h
    return unused


def encoder_parameters(shape: EncoderShape, vocab: int, positions: int = 512) -> tuple[int, int]:
    """(all, biases-and-norms) parameter counts of a BERT/RoBERTa-style encoder with its MLM head."""
    h, i = shape.hidden, shape.intermediate
    layer_w = 4 * h * h + 2 * h * i
    layer_b = 4 * h + i + h + 4 * h  # projection biases, feed-forward biases, two LayerNorms
    emb = (vocab + positions + 1) * h + 2 * h
    head = h * h + 3 * h + vocab  # transform, its LayerNorm, the vocabulary bias (decoder tied)
    return shape.layers * (layer_w + layer_b) + emb + head, shape.layers * layer_b + 2 * h + 3 * h


def head_flops(hidden: int, num_classes: int, batch: int) -> float:
    """Forward of the small head (h x h transform or pooler, then h x C) on one vector per example."""
    return 2.0 * batch * (hidden * hidden + hidden * num_classes)


@dataclass(frozen=True)
class PassFlops:
    forward: float
    backward: float

    @property
    def total(self) -> float:
        return self.forward + self.backward


def training_batch_flops(shape: EncoderShape, batch: int, seq_len: int, tuning: str, num_classes: int = 0) -> PassFlops:
    """One padded training batch of a whole model tuned `full` or `bias` (BitFit).

    Turns a published per-batch time into a device throughput (device profiles); runs
    record their own passes through `meter.TaskMeter`. Both modes train something in the
    embeddings (weights, or the embedding LayerNorm's bias), so gradients reach layer 0's input.
    """
    if tuning not in ("full", "bias"):
        raise FesError(f"reference tuning must be full or bias, got '{tuning}'")
    t, sq = batch * seq_len, batch * seq_len * seq_len
    fwd = forward_flops(shape, t, sq, shape.layers) + head_flops(shape.hidden, num_classes, batch)
    weights = shape.layers if tuning == "full" else 0
    bwd = backward_flops(shape, t, sq, shape.layers, weights, input_grad=True)
    return PassFlops(fwd, bwd + 2 * head_flops(shape.hidden, num_classes, batch))


def inference_batch_flops(shape: EncoderShape, batch: int, seq_len: int, num_classes: int = 0) -> float:
    return forward_flops(shape, batch * seq_len, batch * seq_len * seq_len, shape.layers) + head_flops(
        shape.hidden, num_classes, batch
    )

"""Forward in two parts around a frozen bottom, with an optional per-client activation cache.

With the bottom b layers (and embeddings) frozen, their output for a given input never
changes, so it need not be recomputed: AutoFedNLP's activation cache. The bottom runs per
example, unpadded, in eval mode and without autograd; the result is stored by the exact
token ids, so a cache hit returns bit-for-bit what recomputing would. The top part then
runs on the padded batch with gradients. The model's own forward does both parts, with its
embeddings and layer list swapped in place for the duration of one call, so its own
attention-mask, rotary-position and causal-mask code is reused unchanged:
- encoders with `embeddings` and `encoder.layer` (BERT, RoBERTa and their relatives);
- decoders with `embed_tokens`, `layers` and a final `norm` (Llama, Qwen2, Gemma3, Mistral):
  the bottom runs without the final norm, the top from `inputs_embeds` at the same positions
  (0..n-1: batches are right-padded, so a row's real tokens never see its padding).
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from ..errors import FesError


class _Given(nn.Module):
    """Stands in for the embeddings: returns the hidden states it was given."""

    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden

    def forward(self, *args, **kwargs) -> torch.Tensor:
        return self.hidden


class ActivationCache:
    """Frozen-bottom outputs by token ids; saved in and loaded from the client's folder."""

    def __init__(self) -> None:
        self.store: dict[str, torch.Tensor] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(ids: torch.Tensor) -> str:
        return hashlib.sha1(ids.to(torch.int64).numpy().tobytes()).hexdigest()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(self.store, tmp)
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> "ActivationCache":
        cache = ActivationCache()
        if path.is_file():
            cache.store = torch.load(path, weights_only=True)
        return cache


class FrozenBottom:
    """Runs an encoder or decoder stack as frozen bottom (cached) + trainable top."""

    def __init__(self, base_model: nn.Module, frozen_layers: int):
        encoder = getattr(base_model, "encoder", None)
        if hasattr(base_model, "embeddings") and encoder is not None and hasattr(encoder, "layer"):
            self.owner, self.layers_attr, self.embed_attr, self.norm_attr = encoder, "layer", "embeddings", None
            self.extra: dict = {}
        elif all(hasattr(base_model, n) for n in ("embed_tokens", "layers", "norm")):
            self.owner, self.layers_attr, self.embed_attr, self.norm_attr = base_model, "layers", "embed_tokens", "norm"
            self.extra = {"use_cache": False}
        else:
            raise FesError(
                f"{type(base_model).__name__} has neither embeddings/encoder.layer nor "
                f"embed_tokens/layers/norm: the frozen-bottom split supports BERT-style encoders "
                f"and Llama-style decoders"
            )
        self.base = base_model
        self.layers = getattr(self.owner, self.layers_attr)
        self.b = frozen_layers
        self.cache: ActivationCache | None = None

    @contextlib.contextmanager
    def _swapped(self, embeddings: nn.Module | None, layers: nn.ModuleList, bottom: bool = False) -> Iterator[None]:
        old_emb, old_layers = getattr(self.base, self.embed_attr), getattr(self.owner, self.layers_attr)
        old_norm = getattr(self.base, self.norm_attr) if self.norm_attr else None
        if embeddings is not None:
            setattr(self.base, self.embed_attr, embeddings)
        setattr(self.owner, self.layers_attr, layers)
        if bottom and self.norm_attr:  # the final norm belongs to the top
            setattr(self.base, self.norm_attr, nn.Identity())
        # decoders that pick each layer's mask by its index (Gemma3's sliding/full pattern, Qwen2)
        config = getattr(self.base, "config", None)
        old_types = getattr(config, "layer_types", None)
        if isinstance(old_types, list) and not bottom:
            config.layer_types = old_types[self.b :]
        try:
            yield
        finally:
            if isinstance(old_types, list):
                config.layer_types = old_types
            setattr(self.base, self.embed_attr, old_emb)
            setattr(self.owner, self.layers_attr, old_layers)
            if old_norm is not None:
                setattr(self.base, self.norm_attr, old_norm)

    @torch.no_grad()
    def _bottom_one(self, ids: torch.Tensor) -> torch.Tensor:
        was_training = self.base.training
        self.base.eval()
        try:
            with self._swapped(None, nn.ModuleList(list(self.layers)[: self.b]), bottom=True):
                out = self.base(input_ids=ids[None], attention_mask=torch.ones_like(ids)[None], **self.extra)
        finally:
            self.base.train(was_training)
        return out.last_hidden_state[0]

    def _row(self, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
        """One example's bottom output (unpadded ids): from the cache when it holds them, else computed (and kept)."""
        if self.cache is None:
            return self._bottom_one(ids.to(device)).cpu()
        key = ActivationCache.key(ids)
        hit = self.cache.store.get(key)
        if hit is None:
            hit = self.cache.store[key] = self._bottom_one(ids.to(device)).cpu()
            self.cache.misses += 1
        else:
            self.cache.hits += 1
        return hit

    def bottom(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, W, H) frozen-bottom hidden states, per example, zero at padded positions."""
        rows = [self._row(ids[mask.bool()].cpu(), input_ids.device) for ids, mask in zip(input_ids, attention_mask)]
        width = input_ids.shape[1]
        out = torch.zeros(len(rows), width, rows[0].shape[-1], dtype=rows[0].dtype)
        for i, h in enumerate(rows):
            out[i, : len(h)] = h
        return out.to(input_ids.device)

    def fill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Put these examples' bottom outputs in the cache ahead of training (a cached one counts as a hit).

        Training from a filled cache never runs the bottom, so the embeddings and bottom
        layers are not needed while gradients and activations are held (see cost.memory).
        """
        for ids, mask in zip(input_ids, attention_mask):
            self._row(ids[mask.bool()].cpu(), input_ids.device)

    def top(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with self._swapped(_Given(hidden), nn.ModuleList(list(self.layers)[self.b :])):
            return self.base(inputs_embeds=hidden, attention_mask=attention_mask, **self.extra).last_hidden_state

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.top(self.bottom(input_ids, attention_mask), attention_mask)

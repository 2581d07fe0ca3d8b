"""Prompt inputs and the prompt models: class logits = LM logits of the verbalizer words at the slot.

Two backbones, one interface (a batch in, class logits out):
- a masked LM (`PromptMLM`): the logits at the one mask token;
- a causal LM (`PromptCausalLM`): the next-token logits at the last prompt position, so the
  slot must end the pattern (`{text_a} Topic: {mask}`); no mask token is inserted.
Either way the batch carries `mask_pos`, the position whose hidden state is read (each row's
last real token for a causal LM: batches are right-padded).

Only what is needed is computed: the head runs at that one position per example, and only
the verbalizer rows of the vocabulary projection are used (the full projection at every
position makes a MiniLM training step about 2x slower). Batches are padded to their longest
member, not to max_len. Texts are truncated, never the pattern.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.activations import gelu

from ..errors import FesError
from ..models import mlm_head
from .pvp import split_pattern
from .words import head_words, words_apart


def _special_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The special tokens around one sequence ([CLS] .. [SEP], <s> .. </s>), read off the tokenizer."""
    probe = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(probe) + 1):
        if full[start : start + len(probe)] == probe:
            return full[:start], full[start + len(probe) :]
    raise FesError(f"cannot find where {type(tokenizer).__name__} puts its special tokens")


class PromptEncoder:
    """Turns (text_a, text_b) into pattern token ids: with exactly one mask token (masked LM),
    or ending where the verbalizer word would come next (causal=True)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, pattern: str, max_len: int, causal: bool = False):
        self.causal = causal
        if causal:
            if pattern.rstrip().endswith("{mask}") is False:
                raise FesError(
                    f"pattern {pattern!r} must end with {{mask}} for a causal LM (it predicts the "
                    f"verbalizer word as the next token)"
                )
        elif tokenizer.mask_token_id is None:
            raise FesError(
                "the tokenizer has no mask token: use a causal-LM pattern ending in {mask} "
                "with a causal LM, or a masked LM"
            )
        self.tok = tokenizer
        self.max_len = max_len
        self.parts: list[tuple[str, list[int] | None, bool]] = []  # (kind, literal ids, leading space)
        space_before = False
        for i, (kind, value) in enumerate(split_pattern(pattern)):
            if kind == "lit":
                text = value.strip()
                lead = i > 0 and value[:1].isspace()
                if text:  # a newline before a literal stays one ("{text_a}\nTopic: {mask}")
                    sep = "\n" if value.lstrip(" ")[:1] == "\n" else " "
                    ids = tokenizer((sep if lead else "") + text, add_special_tokens=False)["input_ids"]
                    self.parts.append(("lit", ids, lead))
                space_before = value[-1:].isspace() if value else False
            else:
                self.parts.append((kind, None, i > 0 and (space_before or kind != "mask")))
                space_before = False
        self.fixed = sum(len(ids) for k, ids, _ in self.parts if k == "lit") + (0 if causal else 1)  # the mask
        self.prefix, self.suffix = _special_template(tokenizer)
        if causal:  # nothing after the last prompt token (no EOS): the next token is the class word
            self.suffix = []
        self.fixed += len(self.prefix) + len(self.suffix)
        if self.fixed >= max_len:
            raise FesError(f"pattern {pattern!r} needs {self.fixed} tokens, more than max_seq_length={max_len}")
        self._memo: dict[tuple[str, bool], list[int]] = {}
        self._cut = words_apart(tokenizer)  # tokenize a long text's first max_len words only

    def _text_ids(self, text: str, lead: bool) -> list[int]:
        key = (text, lead)
        if key not in self._memo:
            self._memo[key] = self._encode((" " if lead else "") + text)
        return self._memo[key]

    def _encode(self, text: str) -> list[int]:
        if self._cut:
            head = head_words(text, self.max_len)
            if head is not text:
                ids = self.tok(head, add_special_tokens=False)["input_ids"]
                if len(ids) >= self.max_len:
                    return ids[: self.max_len]
        return self.tok(text, add_special_tokens=False, truncation=True, max_length=self.max_len)["input_ids"]

    def ids(self, text_a: str, text_b: str | None = None) -> list[int]:
        lead_a = next(lead for k, _, lead in self.parts if k == "text_a")
        a = self._text_ids(text_a, lead_a)
        lead_b = next((lead for k, _, lead in self.parts if k == "text_b"), False)
        b = self._text_ids(text_b, lead_b) if text_b else []
        budget = self.max_len - self.fixed
        while len(a) + len(b) > budget:  # longest first, as HF's truncation does
            if len(a) >= len(b):
                a = a[:-1]
            else:
                b = b[:-1]
        body: list[int] = []
        for kind, lit, _ in self.parts:
            body += (
                lit
                if kind == "lit"
                else a
                if kind == "text_a"
                else b
                if kind == "text_b"
                else []
                if self.causal
                else [self.tok.mask_token_id]
            )
        return self.prefix + body + self.suffix

    def batch(self, texts_a: Sequence[str], texts_b: Sequence[str | None] | None = None) -> dict[str, torch.Tensor]:
        rows = [self.ids(a, texts_b[i] if texts_b else None) for i, a in enumerate(texts_a)]
        width = max(len(r) for r in rows)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention[i, : len(r)] = 1
        if self.causal:
            mask_pos = attention.sum(dim=1) - 1  # each row's last real token
        else:
            mask_pos = (input_ids == self.tok.mask_token_id).int().argmax(dim=1)
        return {"input_ids": input_ids, "attention_mask": attention, "mask_pos": mask_pos}


def _head_parts(mlm: PreTrainedModel) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Linear] | None:
    """(transform, decoder) of the MLM head for BERT, RoBERTa and DistilBERT families."""
    cls = getattr(mlm, "cls", None)
    if cls is not None and hasattr(cls, "predictions"):
        return cls.predictions.transform, cls.predictions.decoder
    lm = getattr(mlm, "lm_head", None)
    if lm is not None and all(hasattr(lm, n) for n in ("dense", "layer_norm", "decoder")):
        return (lambda h: lm.layer_norm(gelu(lm.dense(h)))), lm.decoder
    if all(hasattr(mlm, n) for n in ("vocab_transform", "vocab_layer_norm", "vocab_projector")):
        return (lambda h: mlm.vocab_layer_norm(mlm.activation(mlm.vocab_transform(h)))), mlm.vocab_projector
    return None


class PromptMLM(nn.Module):
    """Any AutoModelForMaskedLM + verbalizer ids -> class logits at the mask position.

    Only the verbalizer rows of the vocabulary bias ever reach a class logit, so that bias is
    frozen and a C-sized `class_bias` (zero at start) trains instead: the same function
    class, without sending a vocabulary-sized vector every round.
    """

    def __init__(self, mlm: PreTrainedModel, verbalizer_ids: list[int]):
        super().__init__()
        self.mlm = mlm
        self._init_prompt(verbalizer_ids)
        self._parts = _head_parts(mlm)

    @property
    def backbone(self) -> PreTrainedModel:
        """The wrapped language model (adapters, the frozen-bottom split and payloads see it)."""
        return self.mlm

    def _init_prompt(self, verbalizer_ids: list[int]) -> None:
        self.register_buffer("verbalizer_ids", torch.tensor(verbalizer_ids, dtype=torch.long), persistent=False)
        self.class_bias = nn.Parameter(torch.zeros(len(verbalizer_ids)))
        self.register_parameter("class_head", None)  # see add_class_head
        self._reading_other = False  # `reading` another pattern's words: the LM's own rows
        self.split = None  # a tuning.split.FrozenBottom when the bottom layers are frozen

    def _output_weight(self) -> torch.Tensor:
        """The vocabulary projection whose verbalizer rows score the classes (the MLM head's decoder)."""
        if self._parts is None:
            raise FesError(
                f"a class head needs {type(self.backbone).__name__}'s MLM head layout (transform, decoder): "
                f"set tuning_args.verbalizer_head false"
            )
        return self._parts[1].weight

    def add_class_head(self) -> None:
        """Score the classes with a C x hidden head of their own, a copy of the verbalizer words'
        output rows (WARP's class embeddings, Hambardzumyan et al., ACL 2021): the same logits
        until training moves it. Bias-only plans train it beside the biases (C x 576 values on
        SmolLM2); the copy is untied, so the words' input embeddings stay as they are."""
        rows = self._output_weight()[self.verbalizer_ids]
        self.class_head = nn.Parameter(rows.detach().clone())

    def _class_rows(self, weight: torch.Tensor) -> torch.Tensor:
        """The rows that score the classes: the class head when there is one (and the words
        read are its own), else the verbalizer words' rows of `weight`."""
        if self.class_head is not None and not self._reading_other:
            return self.class_head
        return self._verbalizer_rows(weight)

    def _verbalizer_rows(self, weight: torch.Tensor) -> torch.Tensor:
        """weight[verbalizer_ids]. When `weight` is the trainable input embedding too (a tied
        head, SmolLM2's and RoBERTa's), these rows' gradient is a sparse tensor that autograd
        adds to the embedding's dense gradient when that arrives, at the end of the backward
        pass, instead of a dense vocabulary-sized tensor held all through it (113 MB for
        SmolLM2): the same sums, so the same weights bit for bit (tests/test_causal_lm.py)."""
        embedding = self.backbone.get_input_embeddings()
        if self.split is None and weight.requires_grad and embedding is not None and weight is embedding.weight:
            return nn.functional.embedding(self.verbalizer_ids, weight, sparse=True)
        return weight[self.verbalizer_ids]

    @contextlib.contextmanager
    def reading(self, verbalizer_ids: list[int]) -> Iterator[None]:
        """Class logits from these verbalizer words for the duration (a second pattern's own
        words in PET's labeling ensemble); the trained class bias applies as it is."""
        if len(verbalizer_ids) != len(self.verbalizer_ids):
            raise ValueError(f"{len(verbalizer_ids)} verbalizer ids for {len(self.verbalizer_ids)} classes")
        kept = self.verbalizer_ids
        self.verbalizer_ids = torch.tensor(verbalizer_ids, dtype=torch.long, device=kept.device)
        self._reading_other = True
        try:
            yield
        finally:
            self.verbalizer_ids = kept
            self._reading_other = False

    def freeze_vocab_bias(self) -> None:
        """Call after choosing the trainable set: the vocabulary bias never trains."""
        decoder = self._parts[1] if self._parts is not None else self.mlm.get_output_embeddings()
        if decoder is not None and decoder.bias is not None:
            decoder.bias.requires_grad_(False)
        head_bias = getattr(getattr(getattr(self.mlm, "cls", None), "predictions", None), "bias", None)
        for bias in (head_bias, getattr(getattr(self.mlm, "lm_head", None), "bias", None)):
            if isinstance(bias, nn.Parameter):
                bias.requires_grad_(False)

    @property
    def caches_bottom(self) -> bool:
        """A frozen bottom whose outputs go to an activation cache (see `fill_cache`)."""
        return self.split is not None and self.split.cache is not None

    def fill_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Compute these examples' frozen-bottom outputs into the activation cache now."""
        self.split.fill(input_ids, attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_pos: torch.Tensor) -> torch.Tensor:
        if self.split is not None:
            hidden = self.split(input_ids, attention_mask)
        else:
            hidden = self.mlm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        at_mask = hidden[torch.arange(len(hidden), device=hidden.device), mask_pos]
        if self._parts is None:  # unknown head layout (no class head): full projection, then pick the rows
            return mlm_head(self.mlm)(at_mask)[:, self.verbalizer_ids] + self.class_bias
        transform, decoder = self._parts
        h = transform(at_mask)
        logits = h @ self._class_rows(decoder.weight).T
        if decoder.bias is not None:
            logits = logits + decoder.bias[self.verbalizer_ids]
        return logits + self.class_bias


class PromptCausalLM(PromptMLM):
    """Any AutoModelForCausalLM + verbalizer ids -> class logits: the next-token logits of the
    verbalizer words' first tokens at each row's last prompt position (`mask_pos`).

    Only those rows of the output projection are computed; a model that soft-caps its final
    logits (Gemma) gets the same cap. The tied output embedding is the input embedding, which
    the layer plans treat as the bottom (frozen unless everything trains)."""

    def __init__(self, lm: PreTrainedModel, verbalizer_ids: list[int]):
        nn.Module.__init__(self)
        self.lm = lm
        self._init_prompt(verbalizer_ids)
        self._parts = None
        self._softcap = getattr(
            getattr(lm.config, "get_text_config", lambda: lm.config)(), "final_logit_softcapping", None
        )

    @property
    def backbone(self) -> PreTrainedModel:
        return self.lm

    def _output_weight(self) -> torch.Tensor:
        return self.lm.get_output_embeddings().weight

    def freeze_vocab_bias(self) -> None:
        out = self.lm.get_output_embeddings()
        if out is not None and getattr(out, "bias", None) is not None:
            out.bias.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_pos: torch.Tensor) -> torch.Tensor:
        if self.split is not None:
            hidden = self.split(input_ids, attention_mask)
        else:
            hidden = self.lm.base_model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        last = hidden[torch.arange(len(hidden), device=hidden.device), mask_pos]
        out = self.lm.get_output_embeddings()
        logits = last @ self._class_rows(out.weight).T
        if getattr(out, "bias", None) is not None:
            logits = logits + out.bias[self.verbalizer_ids]
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return logits + self.class_bias

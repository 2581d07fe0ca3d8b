"""FLOPs of the filtering proxy (Sentence-BERT) when a client embeds its pool.

Representational filtering embeds a client's unlabeled pool once with a small proxy and
keeps the result in the client's folder. That one pass is real on-device compute, so it is
costed like any other forward pass: the proxy's own geometry and tokenizer, its maximum
length, batches of 64 texts sorted by length (sentence-transformers' encode) padded to
their longest member.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .flops import EncoderShape, forward_flops

# written by pseudo.filtering.cached_order in the client's folder when the pool is embedded
EMBEDDINGS_FILE = "proxy_embeddings.npy"
ENCODE_BATCH = 64


@lru_cache(maxsize=4)
def _proxy(name: str):
    from transformers import AutoConfig, AutoTokenizer

    from ..model_files import resolve_model_path

    path = resolve_model_path(name)
    tok = AutoTokenizer.from_pretrained(path)
    max_len = min(int(getattr(tok, "model_max_length", 512) or 512), 512)
    st_cfg = Path(path) / "sentence_bert_config.json"
    if st_cfg.is_file():
        max_len = int(json.loads(st_cfg.read_text()).get("max_seq_length", max_len))
    return EncoderShape.of(AutoConfig.from_pretrained(path)), tok, max_len


def proxy_embedding_flops(name: str, texts: Sequence[str], cap: int | None = None) -> float:
    """Forward FLOPs of embedding `texts` with the proxy model `name` (reading at most `cap`
    tokens, as filtering.ProxyEmbedder does with the prompt model's max length)."""
    if not texts:
        return 0.0
    shape, tok, max_len = _proxy(name)
    max_len = min(max_len, cap) if cap else max_len
    lengths = sorted(len(ids) for ids in tok(list(texts), truncation=True, max_length=max_len)["input_ids"])
    total = 0.0
    for start in range(0, len(lengths), ENCODE_BATCH):
        chunk = lengths[start : start + ENCODE_BATCH]
        width = max(chunk)
        total += forward_flops(shape, len(chunk) * width, len(chunk) * width * width, shape.layers)
    return total

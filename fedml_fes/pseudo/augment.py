"""Strong augmentation of pseudo-labeled text: the consistency idea of SFLM (Chen et al., EMNLP
2021) and FixMatch. A pass keeps only the model's most confident answers, which it already
gives: trained on as they are, they carry almost no gradient (a FedFSL round's loss on them
falls to ~1e-3) and only dilute the gold clients' updates in FedAvg. Trained on a copy with
words dropped, the same label asks the model to hold its answer on less evidence: a real
learning signal from unlabeled text. The labeling pass itself always reads the clean text.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def drop_words(texts: Sequence[str], rate: float, generator: torch.Generator) -> list[str]:
    """Each text with every word dropped with probability `rate` (whitespace words; at least one
    kept); `rate` 0 returns the texts unchanged. Draws from `generator`: the run's seed decides."""
    if rate <= 0:
        return list(texts)
    out = []
    for text in texts:
        words = text.split()
        if len(words) < 2:
            out.append(text)
            continue
        keep = torch.rand(len(words), generator=generator) >= rate
        if not bool(keep.any()):
            keep[int(torch.randint(len(words), (1,), generator=generator))] = True
        out.append(" ".join(w for w, k in zip(words, keep.tolist()) if k))
    return out

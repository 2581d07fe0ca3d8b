"""Representational filtering: rank a client's unlabeled pool by how much each sample adds.

A Sentence-BERT proxy embeds the pool once (cached in the client's store). The embeddings
are mean-centred over the pool first, as in the paper's reference code: sentence encoders put
every text in a narrow cone, and cosine on raw vectors then ranks neighbours by that shared
direction more than by topic. With V(x) the k nearest neighbours of x by cosine and E(u) = {x : u in V(x)}, the greedy step picks

    argmax_u  score(u) = sum over x in E(u) of rho ** (-|V(x) & L|),   rho > 1,

moves u into the selected set L and rescores: a sample is worth labeling when it stands for
many neighbourhoods not yet covered (representative and diverse). The whole ranking is
computed once; labeling passes infer only a growing prefix of it, so the rest of the pool is
never run through the big model. Vectorized: each greedy step touches only the k*|E(u)|
scores that change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..cost.proxy import EMBEDDINGS_FILE
from ..errors import FesError


def knn_indices(embeddings: np.ndarray, k: int, block: int = 2048) -> np.ndarray:
    """(N, k) indices of each row's k most cosine-similar other rows (self excluded)."""
    n = len(embeddings)
    if n < 2:
        return np.zeros((n, 0), dtype=np.int64)
    k = min(k, n - 1)
    emb = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    emb = emb.astype(np.float32)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block):
        sims = emb[start : start + block] @ emb.T
        rows = np.arange(sims.shape[0])
        sims[rows, rows + start] = -np.inf  # not its own neighbour
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
        out[start : start + block] = np.take_along_axis(part, order, axis=1)
    return out


def neighbour_count(knn: int, pool_size: int, pool_share: float) -> int:
    """k of V(x) for a pool: `knn`, but at most `pool_share` of the pool (at least 1).

    Vote-k needs neighbourhoods that are local. The paper's k = 150 was set for pools of about
    1,200 texts (AG News over 100 clients); on a pool of at most k + 1 texts every V(x) is the
    whole pool, every sample scores the same, and the greedy order is the pool's stored order
    (which can be sorted by class: then the 'representative' candidates are one class)."""
    return max(1, min(knn, int(round(pool_share * pool_size))))


def centred(embeddings: np.ndarray) -> np.ndarray:
    """Subtract the pool's mean embedding (before cosine similarity)."""
    return embeddings - embeddings.mean(axis=0, keepdims=True)


def vote_k_order(neighbours: np.ndarray, rho: float, limit: int | None = None) -> np.ndarray:
    """Greedy selection order over the pool (first `limit` picks; all by default)."""
    if rho <= 1:
        raise FesError(f"filter_args.rho must be > 1, got {rho}")
    n, k = neighbours.shape
    limit = n if limit is None else min(limit, n)
    if k == 0:
        return np.arange(limit, dtype=np.int64)
    flat = neighbours.ravel()
    # E(u) as CSR: the x's whose neighbour list contains u
    by_u = np.argsort(flat, kind="stable")
    owners = by_u // k
    starts = np.searchsorted(flat[by_u], np.arange(n + 1))
    covered = np.zeros(n)  # |V(x) & L| per x
    score = np.bincount(flat, minlength=n).astype(np.float64)  # rho ** 0 per x in E(u)
    taken = np.zeros(n, dtype=bool)
    order = np.empty(limit, dtype=np.int64)
    for step in range(limit):
        u = int(np.argmax(np.where(taken, -np.inf, score)))
        order[step] = u
        taken[u] = True
        xs = owners[starts[u] : starts[u + 1]]
        if len(xs):
            delta = rho ** -(covered[xs] + 1) - rho ** -covered[xs]
            covered[xs] += 1
            np.add.at(score, neighbours[xs].ravel(), np.repeat(delta, k))
    return order


def random_order(n: int, seed: int) -> np.ndarray:
    """The random-filter baseline: a seeded permutation."""
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


class ProxyEmbedder:
    """Sentence-BERT proxy (any sentence-transformers model), loaded once per process.

    `max_len` caps what the proxy reads at what the prompt model reads (model_args.
    max_seq_length): text the model never sees should not decide what it labels, and a
    256-token proxy pass over long articles costs more than the labeling it saves."""

    def __init__(self, name: str, device: str = "cpu", max_len: int | None = None):
        self.name, self.device, self.max_len = name, device, max_len
        self._model = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            from ..model_files import resolve_model_path
            from ..quiet import quiet_transformers

            try:
                with quiet_transformers():
                    self._model = SentenceTransformer(resolve_model_path(self.name), device=self.device)
            except OSError as e:
                raise FesError(f"cannot load the filtering proxy '{self.name}': {str(e).splitlines()[0]}") from None
            if self.max_len:
                self._model.max_seq_length = min(self._model.max_seq_length or self.max_len, self.max_len)
        return np.asarray(
            self._model.encode(
                list(texts), batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
            ),
            dtype=np.float32,
        )


def pool_embeddings(store_dir: Path, texts: Sequence[str], embedder: ProxyEmbedder) -> np.ndarray:
    """The proxy's unit-length embeddings of a client's pool (N x D), computed once and kept in
    the client's folder: the filter and the `agree` labeler's second view read the same file."""
    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir / EMBEDDINGS_FILE
    emb = np.load(path) if path.is_file() else None
    if emb is None or len(emb) != len(texts):
        emb = embedder.embed(texts)
        np.save(path, emb)
    return emb


def cached_order(
    store_dir: Path,
    texts: Sequence[str],
    method: str,
    embedder: ProxyEmbedder,
    knn: int,
    rho: float,
    seed: int,
    pool_share: float,
) -> np.ndarray:
    """The client's ranking of its pool, computed once and kept in its own folder; V(x) holds
    `neighbour_count(knn, len(texts), pool_share)` neighbours."""
    store_dir.mkdir(parents=True, exist_ok=True)
    k = neighbour_count(knn, len(texts), pool_share)
    path = store_dir / f"filter_{method}_k{k}_rho{rho:g}_centred.npy"
    if path.is_file():
        order = np.load(path)
        if len(order) == len(texts):
            return order
    if method == "random":
        order = random_order(len(texts), seed)
    else:
        order = vote_k_order(knn_indices(centred(pool_embeddings(store_dir, texts, embedder)), k), rho)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, order)
    tmp.replace(path)
    return order

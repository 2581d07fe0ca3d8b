"""Seeded client partitions and the few-shot gold-label generator.

All functions take an explicit `numpy.random.Generator`, so the same seed gives the same
partition in every process (in-process, each mpirun rank, each cross-silo client).
"""

from __future__ import annotations

import numpy as np

from ..errors import FesError


def uniform_partition(num_examples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into `num_clients` near-equal shards."""
    if num_clients > num_examples:
        raise FesError(f"{num_clients} clients but only {num_examples} examples: lower data_args.client_num_in_total")
    perm = rng.permutation(num_examples)
    return [np.sort(s) for s in np.array_split(perm, num_clients)]


def dirichlet_label_partition(
    labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator, max_tries: int = 100
) -> list[np.ndarray]:
    """FedNLP's `niid_label`: per class, split its examples over clients by Dir(alpha).

    Resamples until every client holds at least one example (small alpha on few examples
    can leave clients empty), so no client is a silent no-op in a round.
    """
    if alpha <= 0:
        raise FesError(f"data_args.partition_alpha must be > 0, got {alpha}")
    if num_clients > len(labels):
        raise FesError(f"{num_clients} clients but only {len(labels)} examples: lower data_args.client_num_in_total")
    classes = np.unique(labels)
    for _ in range(max_tries):
        shards: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            props = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for client, part in enumerate(np.split(idx, cuts)):
                shards[client].append(part)
        parts = [np.sort(np.concatenate(s)) for s in shards]
        if min(len(p) for p in parts) > 0:
            return parts
    raise FesError(
        f"data_args.partition_alpha={alpha} leaves some of {num_clients} clients empty after "
        f"{max_tries} draws: raise alpha or lower client_num_in_total"
    )


def assign_gold_labels(
    client_indices: list[np.ndarray], total: int, owners: int, sparsity: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Pick which examples carry gold labels (AUG-FedPrompt/FeS's generator).

    `total` labels (n) go to `owners` (xi) randomly chosen clients in proportions drawn from
    Dir(sparsity) (gamma): 1e-3 puts nearly all labels on one or two clients ("skewed"), 100
    spreads them evenly. A client never gets more labels than examples; the overflow moves to
    the owners with room, largest share first. Returns, per client, the sorted global ids of
    its gold examples (a subset of that client's examples).
    """
    num_clients = len(client_indices)
    owners = owners or num_clients
    available = sum(len(ix) for ix in client_indices)
    if total > available:
        raise FesError(f"data_args.gold_labels={total} but the clients hold only {available} examples")
    gold: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(num_clients)]
    if total == 0:
        return gold
    owner_ids = np.sort(rng.choice(num_clients, size=owners, replace=False))
    capacity = np.array([len(client_indices[c]) for c in owner_ids])
    if total > capacity.sum():
        raise FesError(
            f"data_args.gold_labels={total} but the {owners} gold clients (data_args.gold_clients) "
            f"hold only {capacity.sum()} examples: raise gold_clients"
        )
    props = rng.dirichlet(np.full(owners, sparsity))
    counts = np.floor(props * total).astype(int)
    for i in np.argsort(-props)[: total - counts.sum()]:  # largest remainders first
        counts[i] += 1
    # spill counts above capacity to owners with room, in order of their share
    overflow = int(np.maximum(counts - capacity, 0).sum())
    counts = np.minimum(counts, capacity)
    for i in np.argsort(-props):
        if overflow == 0:
            break
        take = min(overflow, capacity[i] - counts[i])
        counts[i] += take
        overflow -= take
    for c, k in zip(owner_ids, counts):
        if k:
            gold[c] = np.sort(rng.choice(client_indices[c], size=int(k), replace=False))
    return gold


def quantity_partition(num_examples: int, num_clients: int, beta: float, rng: np.random.Generator) -> list[np.ndarray]:
    """FedNLP's `niid_quantity`: client sizes ~ Dir(beta), labels left iid.

    Every client first gets one example, the rest is cut by Dirichlet proportions (largest
    remainders round up). Unlike resampling until no client is empty, this always ends and
    stays a pure function of the generator state.
    """
    if beta <= 0:
        raise FesError(f"data_args.partition_beta must be > 0, got {beta}")
    if num_clients > num_examples:
        raise FesError(f"{num_clients} clients but only {num_examples} examples: lower data_args.client_num_in_total")
    perm = rng.permutation(num_examples)
    props = rng.dirichlet(np.full(num_clients, beta))
    rest = num_examples - num_clients
    sizes = np.floor(props * rest).astype(np.int64)
    for i in np.argsort(-(props * rest - sizes), kind="stable")[: rest - int(sizes.sum())]:
        sizes[i] += 1
    sizes += 1
    return [np.sort(s) for s in np.split(perm, np.cumsum(sizes)[:-1])]


def split_evenly(num_examples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into near-equal shards; clients may get none (per-client test sets)."""
    perm = rng.permutation(num_examples)
    return [np.sort(s) for s in np.array_split(perm, num_clients)]


def partition_clients(
    method: str, labels: np.ndarray, num_clients: int, alpha: float, beta: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Dispatch on `data_args.partition_method`: each client's sorted example indices."""
    if method == "uniform":
        return uniform_partition(len(labels), num_clients, rng)
    if method == "niid_label":
        return dirichlet_label_partition(labels, num_clients, alpha, rng)
    if method == "niid_quantity":
        return quantity_partition(len(labels), num_clients, beta, rng)
    raise FesError(
        f"data_args.partition_method '{method}' cannot be drawn (known: uniform, niid_label, "
        f"niid_quantity; fednlp_h5 is read from a file)"
    )

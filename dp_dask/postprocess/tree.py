"""The attributes' maximum-information spanning tree (Chow–Liu) and the tables it implies.

Fitted to consistent noisy marginals, so it is post-processing. The tree gives the sampler its
start (dp_dask.postprocess.rowupdate.sample_tree) and, through the tables it implies for every
pair (linked by the path between them), a better prior than independence to shrink noisy
tables towards.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, minimum_spanning_tree

from dp_dask.postprocess.consistency import Marginals


def mutual_information(table: np.ndarray) -> float:
    """Mutual information (nats) of the two attributes of a count table."""
    joint = table / table.sum()
    product = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
    positive = joint > 0
    return float(np.sum(joint[positive] * np.log(joint[positive] / product[positive])))


def spanning_tree(marginals: Marginals, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Breadth-first order and parents (-1 for the root) of a maximum-information spanning tree.

    A Chow–Liu tree fitted to the consistent noisy tables: post-processing, no privacy cost.
    """
    weights = np.zeros((m, m))
    for (a, b), table in marginals.two_way.items():
        # +1 keeps zero-information pairs as edges, so the tree spans every attribute
        weights[a, b] = 1.0 + mutual_information(table)
    if m == 1 or not weights.any():
        return np.arange(m), np.full(m, -1)
    tree = minimum_spanning_tree(csr_matrix(-weights))
    order, parents = breadth_first_order(tree, 0, directed=False)
    parents = np.where(parents < 0, -1, parents)
    return order, parents


def implied_tables(marginals: Marginals, order: np.ndarray, parents: np.ndarray,
                   pairs: Iterable[tuple[int, int]] | None = None
                   ) -> dict[tuple[int, int], np.ndarray]:
    """Each pair's table under the tree (``pairs``, default the measured ones): P(a, b) =
    Σ_c P(c) P(a | c) P(b | c), c the lowest common ancestor, each conditional a product of the
    tables' conditionals along the path."""
    depth = np.zeros(len(order), dtype=np.int64)
    for child in order[1:]:
        depth[child] = depth[parents[child]] + 1

    def down(ancestor: int, node: int) -> np.ndarray:
        """P(node | ancestor) as a |ancestor| × |node| matrix."""
        path = [node]
        while path[-1] != ancestor:
            path.append(parents[path[-1]])
        size = len(marginals.one_way[ancestor])
        conditional = np.eye(size)
        for parent, child in zip(path[::-1], path[-2::-1]):
            table = marginals.table(parent, child)
            rows = table.sum(axis=1, keepdims=True)
            conditional = conditional @ np.divide(table, rows, out=np.zeros_like(table),
                                                  where=rows > 0)
        return conditional

    tables = {}
    for a, b in marginals.two_way if pairs is None else pairs:
        x, y = a, b
        while x != y:  # climb the deeper one until they meet: the lowest common ancestor
            if depth[x] >= depth[y]:
                x = parents[x]
            else:
                y = parents[y]
        tables[(a, b)] = down(x, a).T @ (marginals.one_way[x][:, None] * down(x, b))
    return tables

"""DPView's post-processing (numpy): totals, weighted consistency on the attributes linked
views share, non-negativity, and integer tables propagated along the chain."""

from __future__ import annotations

import math

import numpy as np

from dp_dask.copula.model import project_to_total
from dp_dask.data.tables import round_to_total
from dp_dask.methods.dpview.config import DPViewConfig, View
from dp_dask.methods.dpview.layout import chain_links
from dp_dask.postprocess.rowupdate import round_rows


def _block_axes(view: View, shared: View) -> list[int]:
    return ([view.index(a) for a in shared]
            + [i for i, a in enumerate(view) if a not in shared])


def as_blocks(table: np.ndarray, view: View, shared: View) -> np.ndarray:
    """The table as a (shared cells, other cells) matrix: ``shared``'s axes first, in its order."""
    moved = np.transpose(table, _block_axes(view, shared))
    return moved.reshape(math.prod(moved.shape[: len(shared)]), -1)


def from_blocks(blocks: np.ndarray, view: View, shared: View, shape: tuple[int, ...]
                ) -> np.ndarray:
    """Inverse of :func:`as_blocks`."""
    axes = _block_axes(view, shared)
    return blocks.reshape([shape[i] for i in axes]).transpose(np.argsort(axes))


def upper_links(views: tuple[View, ...], upper: tuple[View | None, ...]
                ) -> list[tuple[int, int, View]]:
    """(base view, upper view, shared attributes) for DPView+'s consistency: the kept upper views
    follow the chain in ``views``; uᵢ shares bᵢ \\ cᵢ with bᵢ and bᵢ₊₁ \\ cᵢ with bᵢ₊₁."""
    links = []
    position = len(views) - sum(v is not None for v in upper)
    for i, view in enumerate(upper):
        if view is None:
            continue
        for base in (2 * i, 2 * i + 2):
            links.append((base, position, tuple(a for a in view if a in views[base])))
        position += 1
    return links


def make_consistent(tables: list[np.ndarray], views: tuple[View, ...], shares: np.ndarray,
                    links: list[tuple[int, int, View]] | None = None) -> list[np.ndarray]:
    """One round: linked views' marginals on their shared attributes S replaced by their
    inverse-variance average, the correction spread evenly over each block's ξ cells.

    View i's marginal on S sums ξᵢ cells of Laplace variance 2bᵢ² ∝ 1/Pᵢ², so its weight is
    wᵢ ∝ Pᵢ²/ξᵢ. Totals are kept when both tables have the same total. ``links`` default to the
    chain's (:func:`chain_links`); DPView+ adds :func:`upper_links`.
    """
    tables = [t.astype(np.float64, copy=True) for t in tables]
    for i, j, shared in chain_links(views) if links is None else links:
        blocks = [as_blocks(tables[v], views[v], shared) for v in (i, j)]
        margins = [b.sum(axis=1) for b in blocks]
        weights = [shares[v] ** 2 / b.shape[1] for v, b in zip((i, j), blocks)]
        target = (weights[0] * margins[0] + weights[1] * margins[1]) / sum(weights)
        for v, b, margin in zip((i, j), blocks, margins):
            b = b + ((target - margin) / b.shape[1])[:, None]
            tables[v] = from_blocks(b, views[v], shared, tables[v].shape)
    return tables


def non_negative(table: np.ndarray, total: float) -> np.ndarray:
    """Cells ≥ 0 summing to ``total``: the limit of the paper's iteration (package docstring)."""
    return project_to_total(table, total)


def inconsistency(tables: list[np.ndarray], views: tuple[View, ...],
                  links: list[tuple[int, int, View]] | None = None) -> float:
    """The largest difference between linked views' marginals on what they share."""
    return max((float(np.abs(as_blocks(tables[i], views[i], s).sum(axis=1)
                             - as_blocks(tables[j], views[j], s).sum(axis=1)).max())
                for i, j, s in (chain_links(views) if links is None else links)), default=0.0)


def post_process(noisy: list[np.ndarray], views: tuple[View, ...], shares: np.ndarray,
                 n_rows: int, upper: tuple[View | None, ...] = (),
                 config: DPViewConfig = DPViewConfig()) -> tuple[list[np.ndarray], int, float]:
    """Tables summing to n, consistent (within ``config.consistency_tol``, at most
    ``config.max_rounds`` rounds) and the chain's ≥ 0; with the rounds run and the remaining
    inconsistency.

    ``views`` is the chain followed by DPView+'s kept upper views (``upper``: one per cross
    view, None where dropped). The upper views take part in every consistency round (linked to
    both their base views, :func:`upper_links`) but not in the normalisation (the projection
    onto {x ≥ 0, Σx = n}), which only the chain's tables get, as in the paper.
    """
    chain = len(views) - sum(v is not None for v in upper)
    links = chain_links(views[:chain]) + upper_links(views, upper)
    tables = [t + (n_rows - t.sum()) / t.size for t in noisy]
    gap = math.inf
    rounds = 0
    while rounds < config.max_rounds and gap > config.consistency_tol:
        tables = make_consistent(tables, views, shares, links)
        tables = [non_negative(t, n_rows) for t in tables[:chain]] + tables[chain:]
        gap = inconsistency(tables, views, links)
        rounds += 1
    return tables, rounds, gap


def propagate(tables: list[np.ndarray], views: tuple[View, ...], total: int
              ) -> list[np.ndarray]:
    """Integer tables summing to ``total``, exactly consistent along the chain: b₁ rounded to the
    total, then each view's blocks rounded to the previous view's integer marginal on the
    attributes they share. Idempotent on consistent integer tables of that total."""
    out = [round_to_total(tables[0].ravel(), total).reshape(tables[0].shape)]
    for previous, t, shared in chain_links(views):
        targets = as_blocks(out[previous], views[previous], shared).sum(axis=1)
        blocks = round_rows(as_blocks(tables[t], views[t], shared), targets)
        out.append(from_blocks(blocks, views[t], shared, tables[t].shape))
    return out

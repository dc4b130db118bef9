"""DPView's views, laid out from public inputs only: the chain b₁, c₁, b₂, … of base and cross
views, the guideline's view size and DPView+'s upper cross views."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from dp_dask.checks import MAX_TABLE_CELLS, WARN_TABLE_CELLS, CostError
from dp_dask.data.schema import Schema
from dp_dask.exceptions import DpDaskWarning
from dp_dask.methods.dpview.config import DEFAULT_TRIES, DEFAULT_VIEW_SIZE, DPViewConfig, View
from dp_dask.methods.dpview.measure import budget_shares


def domain(view: View, sizes: np.ndarray) -> int:
    """A view's domain size: the product of its attributes' sizes."""
    return math.prod(int(sizes[a]) for a in view)


def cross_view(left: View, right: View, sizes: np.ndarray, view_size: int) -> View:
    """The ⌊d/2⌋ largest-domain attributes of ``left`` and the ⌈d/2⌉ smallest of ``right``."""
    half = view_size // 2
    largest = sorted(left, key=lambda a: (-int(sizes[a]), a))[:half]
    smallest = sorted(right, key=lambda a: (int(sizes[a]), a))[: view_size - half]
    return tuple(sorted(largest + smallest))


def sorted_base_views(groups: list[np.ndarray], sizes: np.ndarray) -> tuple[View, ...]:
    """Algorithm 1's order: base views by ascending domain size (ties: attribute indices), each
    view's attributes ascending. The chain then links views of like size, so a cross view (the
    largest attributes of the smaller bᵢ, the smallest of the larger bᵢ₊₁) stays near their size.
    """
    views = [tuple(sorted(int(a) for a in group)) for group in groups]
    return tuple(sorted(views, key=lambda v: (domain(v, sizes), v)))


@dataclass(frozen=True)
class ViewLayout:
    """Base views b₁…b_k and cross views c₁…c_{k−1}; ``views`` is the chain b₁, c₁, b₂, …"""

    base: tuple[View, ...]
    cross: tuple[View, ...]
    accepted: bool  # whether its cross views are no larger than its largest base view

    @property
    def views(self) -> tuple[View, ...]:
        chain = [self.base[0]]
        for c, b in zip(self.cross, self.base[1:]):
            chain += [c, b]
        return tuple(chain)

    def to_json(self, schema: Schema) -> dict[str, Any]:
        sizes = schema.sizes
        return {"views": [[schema.names[a] for a in v] for v in self.views],
                "kinds": ["base" if i % 2 == 0 else "cross" for i in range(len(self.views))],
                "domain_sizes": [domain(v, sizes) for v in self.views],
                "total_domain": sum(domain(v, sizes) for v in self.views),
                "cross_rule_met": self.accepted}


def check_view_size(view_size: object) -> None:
    if isinstance(view_size, bool) or int(view_size) != view_size or view_size < 2:
        raise ValueError(f"view_size must be an integer >= 2 (a cross view needs an attribute of "
                         f"each neighbour), got {view_size!r}")


def check_tries(tries: object) -> None:
    if isinstance(tries, bool) or int(tries) != tries or tries < 1:
        raise ValueError(f"tries must be an integer >= 1, got {tries!r}")


def view_layout(sizes: np.ndarray, view_size: int = DEFAULT_VIEW_SIZE,
                tries: int = DEFAULT_TRIES, seed: int = 0) -> ViewLayout:
    """The least-D layout of ``tries`` seeded ones, preferring those meeting the cross-view rule.

    A function of the public domain sizes and the seed only.
    """
    check_view_size(view_size)
    check_tries(tries)
    sizes = np.asarray(sizes)
    rng = np.random.default_rng(seed)
    groups = math.ceil(len(sizes) / view_size)
    best: tuple[tuple[bool, int], ViewLayout] | None = None
    for _ in range(int(tries)):
        base = sorted_base_views(np.array_split(rng.permutation(len(sizes)), groups), sizes)
        cross = tuple(cross_view(b, c, sizes, int(view_size)) for b, c in zip(base, base[1:]))
        accepted = not cross or (max(domain(v, sizes) for v in cross)
                                 <= max(domain(v, sizes) for v in base))
        key = (not accepted, sum(domain(v, sizes) for v in base + cross))
        if best is None or key < best[0]:
            best = key, ViewLayout(base, cross, accepted)
    return best[1]


def usefulness(views: tuple[View, ...], sizes: np.ndarray, n_rows: float, epsilon: float,
               sensitivity: int) -> float:
    """The least θ-usefulness of the views: a view's expected count per cell n/sᵢ over its
    Laplace scale bᵢ = Δ/(ε·Pᵢ) (PrivBayes's θ, per view). Public inputs and n only."""
    domains = np.array([domain(v, sizes) for v in views], dtype=np.float64)
    scales = sensitivity / (epsilon * budget_shares(domains))
    return float((n_rows / domains / scales).min())


def guideline_view_size(sizes: np.ndarray, n_rows: float, epsilon: float, sensitivity: int, *,
                        tries: int = DEFAULT_TRIES, seed: int = 0, plus: bool = False,
                        config: DPViewConfig = DPViewConfig()) -> int:
    """Section IV-C7's guideline, as read here: the largest d whose layout keeps every view
    θ-useful (:func:`usefulness` ≥ θ = ``config.usefulness``, 4 as PrivBayes), else d = 2.

    Why this reading: the guideline trades the noise per cell, which grows with a view's domain,
    against the dependence a larger view keeps; with no count of the data but n, the per-cell
    signal-to-noise ratio n/(sᵢ·bᵢ) is what public inputs say about the first, and PrivBayes'
    θ-usefulness (the paper's baseline) is that ratio's accepted threshold. Each d's layout is
    :func:`view_layout`'s (with the upper views for DPView+, which share ε), so the rule sees
    the views that would be measured. A function of public sizes, n, ε, Δ, tries and seed.
    """
    best = 2
    for d in range(2, len(sizes) + 1):
        layout = view_layout(sizes, d, tries, seed)
        views = layout.views
        if plus:
            views += tuple(v for v in upper_views(layout, sizes, config)[0] if v is not None)
        if usefulness(views, sizes, n_rows, epsilon, sensitivity) >= config.usefulness:
            best = d
    return best


def chain_links(views: tuple[View, ...]) -> list[tuple[int, int, View]]:
    """(previous view, view, shared attributes) along the chain: view t shares with all views
    before it only attributes of view t − 1 (what linking and propagation rely on)."""
    links = []
    seen: set[int] = set(views[0])
    for t in range(1, len(views)):
        shared = tuple(a for a in views[t] if a in seen)
        if not set(shared) <= set(views[t - 1]):
            raise ValueError(f"view {t} {views[t]} shares attributes with views before "
                             f"{views[t - 1]}: not a chain")
        links.append((t - 1, t, shared))
        seen |= set(views[t])
    return links


def upper_view(left: View, cross: View, right: View) -> View:
    """uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ, sorted."""
    return tuple(sorted((set(left) | set(right)) - set(cross)))


def upper_views(layout: ViewLayout, sizes: np.ndarray, config: DPViewConfig = DPViewConfig()
                ) -> tuple[tuple[View | None, ...], list[dict[str, Any]]]:
    """DPView+'s upper cross views uᵢ = (bᵢ ∪ bᵢ₊₁) \\ cᵢ, one per cross view, None where dropped;
    and why each dropped one was. Public inputs only.

    uᵢ pairs, within each block of the attributes S = cᵢ ∩ bᵢ₊₁, the records' values of
    bᵢ \\ cᵢ with bᵢ₊₁'s values of bᵢ₊₁ \\ cᵢ. Dropped (not measured: no budget) when one side is
    empty (nothing to pair) or its pairing plan, |S|·|uᵢ| cells, exceeds
    ``config.max_plan_cells``.
    """
    kept: list[View | None] = []
    dropped = []
    for i, (left, cross, right) in enumerate(zip(layout.base, layout.cross, layout.base[1:])):
        view = upper_view(left, cross, right)
        shared = tuple(a for a in right if a in cross)
        plan = domain(shared, sizes) * domain(view, sizes)
        reason = ("nothing to pair: one base view lies inside the cross view"
                  if not set(view) & set(left) or not set(view) & set(right) else
                  f"pairing plan of {plan:,} cells > {config.max_plan_cells:,}"
                  if plan > config.max_plan_cells else None)
        kept.append(None if reason else view)
        if reason:
            dropped.append({"link": i, "view": list(view), "reason": reason})
    return tuple(kept), dropped


def check_view_cells(views: tuple[View, ...], schema: Schema) -> int:
    """The views' total cells; refuse past MAX_TABLE_CELLS, warn past WARN_TABLE_CELLS (every
    counting task holds all view tables; the post-processing is dense on them)."""
    cells = [domain(v, schema.sizes) for v in views]
    total = sum(cells)
    largest = views[int(np.argmax(cells))]
    what = (f"schema {schema.name!r}: DPView's views hold {total:,} cells (the largest, "
            f"{[schema.names[a] for a in largest]}, {max(cells):,})")
    advice = "use a smaller view_size, merge rare categories or use coarser bins"
    if total > MAX_TABLE_CELLS:
        raise CostError(f"{what}; the limit is {MAX_TABLE_CELLS:,}: {advice}")
    if total > WARN_TABLE_CELLS:
        warnings.warn(f"{what}; expect a slow fit ({advice})", DpDaskWarning, stacklevel=2)
    return total

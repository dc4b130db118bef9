"""Synthetic rows that match their targets: a tree start, then row updates (PrivSyn's GUM).

Both work on one output partition's codes (rows × m) against integer targets already scaled to
the partition's rows, so partitions never communicate and the output depends only on the seed.

* :func:`sample_tree` draws a start from a maximum spanning tree of the attributes (by mutual
  information of the consistent tables): the root's counts and each child's counts within each
  value of its parent are rounded to their targets (largest remainder), and values are shuffled
  within each parent group, so the start carries no i.i.d. sampling error on the tree's tables.
* :func:`update_rows` then repeatedly moves rows out of over-full cells of each 2-way table into
  deficient ones (Zhang et al., "PrivSyn", USENIX Security 2021): half of the moved rows change
  only the two attributes, half are replaced by a copy of a row already in the deficient cell,
  which keeps that row's other attributes consistent with it. With :func:`possible_cells`, no
  move puts a row into a cell another table's target rules out (never-married husbands).
* :func:`match_one_way` finally makes every attribute's counts equal their targets.

Size: most of it is :func:`update_rows` and its compiled kernels (~250 lines), which share the
counter-based coins (``_splitmix``) and the ``_Lookup`` of possible cells; kept with that pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numba
import numpy as np

from dp_dask.compiled import compiled
from dp_dask.data.tables import Domain, round_to_total
from dp_dask.postprocess.config import RowUpdateConfig
from dp_dask.postprocess.consistency import Marginals

# The tuned numbers (the GUM schedule, copies, swaps): RowUpdateConfig, docs/tuning.md.


def round_rows(blocks: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each row rounded to its total by largest remainder: :func:`round_to_total` row by row,
    vectorised because a view has up to millions of blocks and a tree parent thousands of
    values. A row with no mass but a positive total takes the shape of the column sums (uniform
    if those are 0 too)."""
    blocks = np.asarray(blocks, dtype=np.float64)
    totals = np.asarray(totals, dtype=np.int64)
    columns = blocks.sum(axis=0, keepdims=True)
    fallback = columns if columns.sum() > 0 else np.ones_like(columns)
    shape = np.where(blocks.sum(axis=1, keepdims=True) > 0, blocks, fallback)
    scaled = shape * (totals[:, None] / shape.sum(axis=1, keepdims=True))
    counts = np.floor(scaled).astype(np.int64)
    short = totals - counts.sum(axis=1)
    order = np.argsort(counts - scaled, axis=1, kind="stable")  # largest remainder first
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(blocks.shape[1])[None, :], axis=1)
    return counts + (ranks < short[:, None])


def code_dtype(sizes: Iterable[int]) -> np.dtype:
    """The dtype of the codes row updates work on: the narrowest unsigned one holding every
    attribute's codes. They gather whole rows (copies, the guard) and read two columns per
    table: a narrow dtype keeps the codes in cache, row-major (C) order a row on one line."""
    return np.min_scalar_type(max(sizes) - 1)


def sample_tree(targets: Marginals, order: np.ndarray, parents: np.ndarray, rows: int,
                rng: np.random.Generator) -> np.ndarray:
    """Codes (rows, m) whose root and parent→child counts equal their targets up to rounding."""
    m = len(order)
    codes = np.empty((rows, m), dtype=code_dtype(len(counts) for counts in targets.one_way),
                     order="C")
    root = order[0]
    codes[:, root] = rng.permutation(_repeat(round_to_total(targets.one_way[root], rows)))
    for child in order[1:]:
        parent = parents[child]
        table = targets.table(parent, child)
        by_parent = np.argsort(codes[:, parent], kind="stable")
        group_sizes = np.bincount(codes[:, parent], minlength=table.shape[0])
        present = np.flatnonzero(group_sizes)
        shape = table[present]
        shape = np.where(shape.sum(axis=1, keepdims=True) > 0, shape, targets.one_way[child])
        # All groups rounded at once (a 5,000-value parent made this loop most of a wide
        # partition's start); each group is then shuffled in place in the same order as before.
        values = _repeat_rows(round_rows(shape, group_sizes[present]))
        for start, stop in zip(*_bounds(group_sizes[present])):
            rng.shuffle(values[start:stop])
        codes[by_parent, child] = values
    return codes


def _repeat(counts: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


def _repeat_rows(counts: np.ndarray) -> np.ndarray:
    """:func:`_repeat` of each row of ``counts``, concatenated."""
    return np.repeat(np.tile(np.arange(counts.shape[1]), counts.shape[0]), counts.ravel())


def _bounds(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and stop of consecutive segments of the given sizes."""
    stops = np.cumsum(sizes)
    return stops - sizes, stops


def _update_table(codes: np.ndarray, attributes: tuple[int, ...], target: np.ndarray,
                  sizes: np.ndarray, rng: np.random.Generator, seeds: np.ndarray, rate: float,
                  config: RowUpdateConfig, guard: _Guard, scratch: _Scratch) -> None:
    """Move about ``rate`` of each over-full cell's excess rows into the deficient cells.

    Rows are picked by independent coin flips at their cell's rate (two passes over the rows,
    no sort), so counts are right in expectation; the sweeps correct what one visit leaves.
    The compiled loops draw from four ``seeds`` (:func:`_splitmix`), the rest from ``rng``.
    """
    keys, current, coins = _cells_and_coins(codes, attributes, sizes, target.size, seeds[0],
                                            scratch)
    excess = current - target
    bounds, leaving, arrived = _coin_bounds(excess, current, rate, config.duplicate_share,
                                            config.copy_bound)
    if arrived <= config.settled_share * len(keys):
        return
    # One coin per row serves both draws: rows leave only over-full cells and are copied only
    # from deficient ones, so no row's coin decides twice.
    movers, candidates = _below(coins, keys, bounds, leaving)
    if len(movers) == 0:
        return
    arriving = round_to_total(np.maximum(-excess, 0), len(movers))
    # Copies: whole rows already in a deficient cell, picked at the cell's copy rate, each
    # replacing a random mover.
    donors, rest = _donors(coins, keys, movers, candidates, excess, current, arriving,
                           config.duplicate_share, config.copy_bound, seeds[1:3])
    _copy_rows(codes, movers[: len(donors)], donors)
    changed = movers[len(donors):]
    shape = sizes[list(attributes)]
    if len(attributes) == 2 and rest.any():
        cells = _nearby_cells(keys[changed], rest.reshape(shape), seeds[3])
    else:
        cells = rng.permutation(_repeat(round_to_total(rest, len(changed))))
    _place(codes, changed, cells, np.array(attributes), shape, guard.lookup)


class _Scratch:
    """The per-row arrays each table visit of one :func:`update_rows` call reuses: a cell key
    per row (one array per key dtype) and the coins' words.

    Allocated once, not per visit: Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its workers,
    which fixes glibc's mmap threshold, so every large new array is mapped and faulted in
    afresh; a DSS partition's draw took 2.2 s in a worker's setting instead of 1.3 s.
    """

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.words = np.empty((rows + 1) // 2, dtype=np.uint64)
        self._keys: dict[np.dtype, np.ndarray] = {}

    def keys(self, cells: int) -> np.ndarray:
        """A key per row in the narrowest dtype that holds ``cells`` cells: the coin pass reads
        them again."""
        dtype = np.min_scalar_type(cells - 1)
        if dtype not in self._keys:
            self._keys[dtype] = np.empty(self.rows, dtype=dtype)
        return self._keys[dtype]


def _cells_and_coins(codes: np.ndarray, attributes: tuple[int, ...], sizes: np.ndarray,
                     cells: int, seed: np.uint64,
                     scratch: _Scratch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`Domain.index`, their counts, and a coin per row (:func:`_coins`), in one pass for
    1- and 2-way tables, into ``scratch``'s arrays."""
    domain = Domain(sizes)
    if len(attributes) > 2:
        keys = domain.index(codes, attributes)
        counts = np.bincount(keys, minlength=cells)
        _coins(seed, scratch.words)
    else:
        # Specialised, not Domain.table: keys, counts and coins in one compiled pass, no new array.
        keys = scratch.keys(cells)
        counts = np.zeros(cells, dtype=np.int64)
        stride = domain.strides(attributes)[0] if len(attributes) == 2 else 0
        _count_cells(codes, attributes[0], attributes[-1], stride, seed, keys, counts,
                     scratch.words)
    return keys, counts, scratch.words.view(np.uint32)[: len(codes)]


def _copy_rows(codes: np.ndarray, to: np.ndarray, source: np.ndarray) -> None:
    """``codes[to] = codes[source]``, row by row where rows are contiguous: numpy's 2-D fancy
    indexing copies value by value, several times slower (and a compiled loop over the values
    twice as slow)."""
    if codes.flags.c_contiguous:
        whole_rows = codes.view(np.dtype((np.void, codes.shape[1] * codes.itemsize))).ravel()
        np.put(whole_rows, to, np.take(whole_rows, source))
    else:
        codes[to] = codes[source]


class _Lookup(NamedTuple):
    """:class:`_Guard`'s tables for the compiled loops: ``allowed`` is the (d × d) lookup (a
    line per value of each attribute, a column per value of each attribute) packed 8 columns
    to a byte, and attribute a's restricting tables' other attributes are
    ``others[starts[a]:starts[a + 1]]``.

    Packed, a value's line is 2 cache lines on DSS instead of 11: most moves are checked
    against a few tables only (97 % of them meet a zero), so fetching those lines, after a pass
    over all rows has evicted them, was most of the check's time.
    """

    allowed: np.ndarray
    offsets: np.ndarray
    others: np.ndarray
    starts: np.ndarray


class _Guard:
    """:func:`possible_cells` as one boolean lookup over the d dummy columns of all attributes.

    Checking a row against every table of an attribute is then one lookup per restricting
    table's other attribute, instead of one 2-D fancy index per table (26 per attribute on
    DSS), which took over half of the sampling time. Tables without an impossible cell are
    skipped; without any, nothing is ruled out.
    """

    def __init__(self, possible: dict[tuple[int, int], np.ndarray], sizes: np.ndarray) -> None:
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        d = int(np.sum(sizes))
        restricting = {pair: mask for pair, mask in possible.items() if not mask.all()}
        allowed = np.ones((d, d) if restricting else (0, 0), dtype=bool)
        # Each attribute's restricting tables, those with the most impossible cells first:
        # most moves meet a zero (97 % on DSS), and the first one ends the check.
        others: list[list[tuple[float, int]]] = [[] for _ in sizes]
        for (x, y), mask in restricting.items():
            ox, oy = offsets[x], offsets[y]
            allowed[ox : ox + sizes[x], oy : oy + sizes[y]] = mask
            allowed[oy : oy + sizes[y], ox : ox + sizes[x]] = mask.T
            others[x].append((mask.mean(), y))
            others[y].append((mask.mean(), x))
        self.m = len(sizes)
        self.lookup = _Lookup(np.packbits(allowed, axis=1, bitorder="little"), offsets,
                              np.array([y for o in others for _, y in sorted(o)], dtype=np.intp),
                              np.cumsum([0] + [len(o) for o in others], dtype=np.intp))

    def possible(self, row_codes: np.ndarray, a: int, values: np.ndarray,
                 fixed: tuple[int, ...] = ()) -> np.ndarray:
        """Whether each row (its codes ``row_codes``), given ``values`` for attribute a, has a
        non-zero target in every table of a with an attribute outside ``fixed``."""
        mask = np.zeros(self.m, dtype=np.bool_)
        mask[list(fixed)] = True
        return _possible_rows(self.lookup, row_codes, a, values, mask)


# The passes over the rows and the loops over the rows that move, hand-written and compiled:
# numpy took five passes over the rows per visit (keys, bincount, coins, a gather of the
# bounds, a compare) where these take two, and some forty small array operations on the moving
# rows where these loop once. On the DSS shape (99,569 rows, 351 tables, 5 sweeps) update_rows
# takes 1.0 s instead of 3.0. Cached beside this file, so a process (a Dask worker) loads them
# instead of compiling; nogil, as numpy's loops release the GIL too.
@compiled
def _count_cells(codes: np.ndarray, first: int, last: int, stride: int, seed: np.uint64,
                 keys: np.ndarray, counts: np.ndarray, words: np.ndarray) -> None:
    """Each row's cell, ``codes[:, first] * stride + codes[:, last]``, into ``keys``, the rows
    in each cell added to ``counts`` (a 1-way table: first = last, stride 0), and two rows'
    coins in each of ``words`` (:func:`_coins`).

    One loop, two rows a step, the coins computed alongside the counts: 0.15 ms per 100 k rows
    on DSS, where counting alone took 0.20 and the coins 0.04 more. Both rows' codes are read
    before either count is written: the compiler cannot move a read past a write that may
    alias it.
    """
    pairs = codes.shape[0] // 2
    for k in range(pairs):
        key, next_key = (codes[2 * k, first] * stride + codes[2 * k, last],
                         codes[2 * k + 1, first] * stride + codes[2 * k + 1, last])
        keys[2 * k], keys[2 * k + 1] = key, next_key
        counts[key] += 1
        counts[next_key] += 1
        words[k] = _splitmix(seed, k + 1)
    if codes.shape[0] % 2:
        keys[-1] = key = codes[-1, first] * stride + codes[-1, last]
        counts[key] += 1
        words[pairs] = _splitmix(seed, pairs + 1)


# Coins from SplitMix64 (Steele, Lea & Flood, OOPSLA 2014), seeded from the Generator each
# visit: its k-th output from seed s is a fixed mix of s + k·γ, computed for any k at once, and
# each output is two rows' coins. The Generator's own draws took 0.14 ms per 100 k rows (64-bit
# draws split in two), 0.23 as float32.
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27),
        np.uint64(0x94D049BB133111EB), np.uint64(31))


@compiled
def _splitmix(seed: np.uint64, k: int) -> np.uint64:
    """SplitMix64's k-th output from ``seed``."""
    z = seed + np.uint64(k) * _GAMMA
    z = (z ^ (z >> _MIX[0])) * _MIX[1]
    z = (z ^ (z >> _MIX[2])) * _MIX[3]
    return z ^ (z >> _MIX[4])


@compiled
def _uniform(seed: np.uint64, k: int) -> float:
    """A uniform on [0, 1): the top 53 bits of SplitMix64's (k + 1)-th output from ``seed``."""
    return (_splitmix(seed, k + 1) >> np.uint64(11)) * 2.0**-53


@compiled
def _coins(seed: np.uint64, words: np.ndarray) -> None:
    """Two coins per word of ``words``, uniform on 0 … 2³² − 1 as its uint32 halves:
    SplitMix64's first outputs."""
    for k in range(words.size):
        words[k] = _splitmix(seed, k + 1)


@compiled
def _threshold(rate: float) -> np.uint64:
    """A rate as the number of coins (uniform on 0 … 2³² − 1) below it: a coin c is below rate
    r (c / 2³² < r) exactly when c < ⌈r · 2³²⌉; rates from 1 up take every coin."""
    return np.uint64(np.ceil(min(rate, 1.0) * 2.0**32))


@compiled
def _coin_bounds(excess: np.ndarray, current: np.ndarray, rate: float, duplicate_share: float,
                 copy_bound: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Each cell's bound on its rows' coins (:func:`_threshold`) and whether rows below it
    leave: an over-full cell's leave rate, ``rate`` · excess / rows, or a deficient cell's bound
    on its copy rate, as if ``copy_bound`` times its deficit (and one) arrived; and the rows in
    excess, summed.

    Copy rates depend on how many rows leave, so one pass over the rows takes the movers and
    the candidates for copying at once; :func:`_donors` then picks among the few candidates.
    """
    bounds = np.zeros(excess.size, dtype=np.uint64)
    arrived = 0
    for c in range(excess.size):
        rows = max(current[c], 1)
        if excess[c] > 0:
            bounds[c] = _threshold(rate * excess[c] / rows)
            arrived += excess[c]
        elif excess[c] < 0:
            bounds[c] = _threshold(duplicate_share * (copy_bound * -excess[c] + 1) / rows)
    return bounds, excess > 0, arrived


@compiled
def _below(coins: np.ndarray, keys: np.ndarray, bounds: np.ndarray,
           leaving: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose coin is below their cell's bound: those of cells ``leaving``, and the
    others, each in order. (Each found row is written to both lists and kept in one: a branch
    on the cell's kind would be mispredicted half the time.)"""
    movers, others = np.empty(coins.size, np.intp), np.empty(coins.size, np.intp)
    moving = staying = 0
    for i in range(coins.size):
        if coins[i] < bounds[keys[i]]:
            movers[moving], others[staying] = i, i
            moving += leaving[keys[i]]
            staying += not leaving[keys[i]]
    return movers[:moving].copy(), others[:staying].copy()


@compiled
def _donors(coins: np.ndarray, keys: np.ndarray, movers: np.ndarray, candidates: np.ndarray,
            excess: np.ndarray, current: np.ndarray, arriving: np.ndarray,
            duplicate_share: float, copy_bound: float,
            seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose coin is below their deficient cell's copy rate, ``duplicate_share`` ·
    arriving / rows (a random len(movers) of them, if more), and what each cell's arrivals
    leave to rows that move; as many movers, drawn at random, are moved to the front of
    ``movers`` (in place), for the donors to replace.

    The donors are found among the candidates (:func:`_coin_bounds`) where the rates stay
    within their bounds, else (more rows left than they allowed for) in a pass over all.
    """
    bounds = np.zeros(excess.size, dtype=np.uint64)
    within = True
    for c in range(excess.size):
        if excess[c] < 0:
            bounds[c] = _threshold(duplicate_share * arriving[c] / max(current[c], 1))
            within = within and arriving[c] <= copy_bound * -excess[c] + 1
    rows = candidates if within else np.arange(coins.size)
    donors = rows[coins[rows] < bounds[keys[rows]]]
    if donors.size > movers.size:
        _to_front(donors, movers.size, seeds[0])
        donors = donors[: movers.size]
    _to_front(movers, donors.size, seeds[1])
    rest = arriving.copy()
    for row in donors:
        rest[keys[row]] -= 1
    return donors, np.maximum(rest, 0)


@compiled
def _to_front(rows: np.ndarray, k: int, seed: np.uint64) -> None:
    """A uniformly random k of ``rows`` (all, if fewer) moved to the front, in place: the first
    steps of a Fisher–Yates shuffle."""
    for i in range(min(k, rows.size)):
        j = i + int(_uniform(seed, i) * (rows.size - i))
        rows[i], rows[j] = rows[j], rows[i]


@compiled
def _nearby_cells(sources: np.ndarray, deficit: np.ndarray, seed: np.uint64) -> np.ndarray:
    """A deficient cell for each row leaving cell ``sources`` (row-major) of a 2-way table,
    changing one attribute where it can: a cell of the same row or column (a coin decides which,
    when both have deficit), drawn ∝ deficit; any cell only when neither line has any. Two
    uniforms per row (which line, where on it) from ``seed``.

    Changing one attribute keeps the row's other pairs as they were: moving a husband's age
    never makes him a never-married husband. A draw ∝ deficit within a line is the owner of a
    random unit of the line's deficit: one lookup in the units' owners (they number the rows
    arriving, so the lists are short) instead of a binary search per draw.
    """
    cols = deficit.shape[1]
    by_row, row_start, row_total = _owners(deficit)
    by_col, col_start, col_total = _owners(deficit.T.copy())
    cells = np.empty(sources.size, dtype=np.intp)
    for k in range(sources.size):
        i, j = divmod(sources[k], cols)
        unit = _uniform(seed, 2 * k + 1)
        if row_total[i] > 0 and (col_total[j] == 0 or _uniform(seed, 2 * k) < 0.5):
            cells[k] = i * cols + by_row[row_start[i] + int(unit * row_total[i])]
        elif col_total[j] > 0:
            cells[k] = by_col[col_start[j] + int(unit * col_total[j])] * cols + j
        else:
            anywhere = int(unit * by_row.size)
            cells[k] = _line_of(row_start, anywhere) * cols + by_row[anywhere]
    return cells


@compiled
def _owners(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For integer weights (2-D), the column owning each unit of each row's weight, row after
    row, and where each row's units start and how many it has."""
    totals = weights.sum(axis=1)
    starts = np.cumsum(totals) - totals
    owners = np.empty(totals.sum(), dtype=np.intp)
    at = 0
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            for _ in range(weights[i, j]):
                owners[at] = j
                at += 1
    return owners, starts, totals


@compiled
def _line_of(starts: np.ndarray, unit: int) -> int:
    """The row whose units (starting at ``starts``) hold ``unit``."""
    return np.searchsorted(starts, unit, side="right") - 1


@compiled
def _place(codes: np.ndarray, rows: np.ndarray, cells: np.ndarray, attributes: np.ndarray,
           shape: np.ndarray, lookup: _Lookup) -> None:
    """Each of ``rows`` moved to its cell of ``cells`` (row-major, of a table of ``shape`` over
    ``attributes``), unless a changed value meets a zero in another table (:class:`_Guard`).

    A move for one table changes its attributes without looking at the row's other values;
    where another table says a combination does not occur (never-married husbands), the row
    stays put and later sweeps move another one.
    """
    values = np.empty(attributes.size, dtype=np.intp)
    fixed = np.zeros(codes.shape[1], dtype=np.bool_)
    fixed[attributes] = True
    for k in range(rows.size):
        row, cell = rows[k], cells[k]
        for j in range(attributes.size - 1, 0, -1):
            cell, values[j] = divmod(cell, shape[j])
        values[0] = cell
        possible = True
        for j in range(attributes.size):
            if values[j] != codes[row, attributes[j]]:
                possible = possible and _allows(lookup, codes, row, attributes[j], values[j],
                                                fixed)
        if possible:
            for j in range(attributes.size):
                codes[row, attributes[j]] = values[j]


@compiled
def _possible_rows(lookup: _Lookup, row_codes: np.ndarray, a: int, values: np.ndarray,
                   fixed: np.ndarray) -> np.ndarray:
    """:meth:`_Guard.possible`."""
    possible = np.empty(row_codes.shape[0], dtype=np.bool_)
    for k in range(row_codes.shape[0]):
        possible[k] = _allows(lookup, row_codes, k, a, values[k], fixed)
    return possible


@numba.njit(cache=True, nogil=True, inline="always")
def _allows(lookup: _Lookup, codes: np.ndarray, row: int, a: int, value: int,
            fixed: np.ndarray) -> bool:
    """Whether ``row`` of ``codes`` with ``value`` for attribute a has a non-zero target in
    every table of a whose other attribute is not ``fixed`` (indices, not views, in these loops:
    a view costs a reference count)."""
    line = lookup.offsets[a] + value
    for t in range(lookup.starts[a], lookup.starts[a + 1]):
        y = lookup.others[t]
        column = lookup.offsets[y] + codes[row, y]
        if not fixed[y] and not (lookup.allowed[line, column >> 3] >> (column & 7)) & 1:
            return False
    return True


def possible_cells(targets: dict[tuple[int, ...], np.ndarray], sizes: np.ndarray,
                   floors: dict[tuple[int, ...], float] | None = None
                   ) -> dict[tuple[int, int], np.ndarray]:
    """For each 2-way target, which cells may receive moved rows: target above its floor (0 by
    default; a noise-derived floor also rules out cells that noise alone may have filled)."""
    floors = floors or {}
    return {clique: (target > max(floors.get(clique, 0.0), 0.0)).reshape(sizes[list(clique)])
            for clique, target in targets.items() if len(clique) == 2}


def update_rows(codes: np.ndarray, targets: dict[tuple[int, ...], np.ndarray],
                sizes: np.ndarray, rng: np.random.Generator, *,
                possible: dict[tuple[int, int], np.ndarray] | None = None,
                config: RowUpdateConfig = RowUpdateConfig()) -> int:
    """Row updates in place, kept only while they bring the rows closer to the targets.

    Each sweep visits every target table once, in random order. Sweeping stops after a sweep
    that cuts the rows' total excess over the targets by less than ``config.keep_sweeping`` (or
    after ``config.max_sweeps``); the rows are then those of the sweep with the least excess,
    or the rows given if none had less. With ``possible`` (:func:`possible_cells`), no move
    creates a pair another table rules out. Returns the number of sweeps made.
    """
    cliques = list(targets)
    guard = _Guard(possible or {}, sizes)
    scratch = _Scratch(len(codes))
    excess = least = _total_excess(codes, targets, sizes, scratch)
    best = codes.copy()
    rate, sweeps = 1.0, 0
    while sweeps < config.max_sweeps:
        sweeps += 1
        seeds = rng.integers(0, 2**64, size=(len(cliques), 4), dtype=np.uint64)
        for index in rng.permutation(len(cliques)):
            _update_table(codes, cliques[index], targets[cliques[index]], sizes, rng,
                          seeds[index], rate, config, guard, scratch)
        previous, excess = excess, _total_excess(codes, targets, sizes, scratch)
        if excess < least:
            least = excess
            best[...] = codes
        if excess >= (1 - config.keep_sweeping) * previous:
            break
        rate = max(rate * config.update_decay, config.rate_floor)
    codes[...] = best
    return sweeps


def _total_excess(codes: np.ndarray, targets: dict[tuple[int, ...], np.ndarray],
                  sizes: np.ndarray, scratch: _Scratch) -> int:
    """The rows in excess of their target, summed over every table's over-full cells (the
    compiled count draws coins too, unused here: a pass over the rows either way)."""
    return sum(int(np.maximum(_cells_and_coins(codes, clique, sizes, target.size, np.uint64(0),
                                               scratch)[1] - target, 0).sum())
               for clique, target in targets.items())


def match_one_way(codes: np.ndarray, one_way: list[np.ndarray], sizes: np.ndarray,
                  rng: np.random.Generator,
                  possible: dict[tuple[int, int], np.ndarray] | None = None, *,
                  config: RowUpdateConfig = RowUpdateConfig()) -> None:
    """Change just enough values that each attribute's counts equal their integer targets.

    The rows leaving an over-full value are a random subset of exactly its excess; with
    ``possible``, rows whose new value would be impossible are swapped for others of their value.
    """
    guard = None if possible is None else _Guard(possible, sizes)
    for a, target in enumerate(one_way):
        column = codes[:, a].copy()  # contiguous: the sort and the count read it
        excess = np.bincount(column, minlength=len(target)) - target
        if not excess.any():
            continue
        # Rows by value (a radix sort of the narrow codes), then a random ``excess`` of each
        # over-full value's rows, in random order: drawn among its positions (Floyd's method
        # for few), not by shuffling every row, as the excess is a few hundred of 100 k rows.
        grouped = np.argsort(column, kind="stable")
        current = excess + target
        starts = np.cumsum(current) - current
        leaving = np.concatenate([grouped[s + rng.choice(c, e, replace=False)]
                                  for s, c, e in zip(starts, current, excess) if e > 0])
        arriving = rng.permutation(_repeat(np.maximum(-excess, 0)))
        if guard is not None:
            _swap_impossible(codes, a, leaving, arriving, grouped, starts, current, guard, rng,
                             config.swap_rounds)
        codes[leaving, a] = arriving


def _swap_impossible(codes: np.ndarray, a: int, leaving: np.ndarray, arriving: np.ndarray,
                     grouped: np.ndarray, starts: np.ndarray, current: np.ndarray,
                     guard: _Guard, rng: np.random.Generator, rounds: int) -> None:
    """Replace, in place, leaving rows whose arriving value is impossible by other rows of the
    same value drawn at random (``rounds`` at most; what is left stays as drawn)."""
    left = np.zeros(len(codes), dtype=bool)
    left[leaving] = True
    for _ in range(rounds):
        bad = np.flatnonzero(~guard.possible(codes[leaving], a, arriving))
        if len(bad) == 0:
            return
        value = codes[leaving[bad], a]
        offset = (rng.random(len(bad)) * current[value]).astype(np.int64)
        candidate = grouped[starts[value] + offset]
        candidate, first = np.unique(candidate, return_index=True)
        bad = bad[first]
        good = ~left[candidate] & guard.possible(codes[candidate], a, arriving[bad])
        left[leaving[bad[good]]] = False
        left[candidate[good]] = True
        leaving[bad[good]] = candidate[good]

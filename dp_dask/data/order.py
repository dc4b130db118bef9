"""A uniformly random row order, out of core: what makes a positional mechanism a function of
the data set (a multiset) rather than of the file.

Neighbouring data sets are multisets: a neighbour's file may list its rows in any order, so a
mechanism that cuts blocks or takes "the first N rows" by position in the file is not DP in
general (sorted by an attribute, replacing one row moves every row between its old and new
place). :func:`random_row_order` puts the rows in an order drawn uniformly from all n! orders,
whatever the input's order and partitioning, so a positional step applied afterwards has an
output distribution that depends on the multiset alone. For neighbours D and D' (one row x
replaced by x'), couple their orders by giving x' the place of x: every other row keeps its
place, and the ordered sequences differ in exactly one position.

How: each row draws a key, iid uniform in [0, 2⁶³) from ``default_rng([seed, 0, partition])`` (so
independent of its content and position, and the same in a retried task); the frame is sorted
by the key (``set_index`` with fixed, even divisions: a shuffle, no quantile pass), and rows
whose keys tie are put in a uniformly random order of their own (a seeded permutation per output
partition), which makes the order exactly uniform (ties have probability ≤ n²/2⁶⁴). The key is
dropped. Everything is deterministic given the seed, except the order of tied rows, which may
differ between two computations of the same graph (arrival order); lengths and per-partition
counts never do.
"""

from __future__ import annotations

import secrets

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dp_dask.data.encode import code_dtype, encode_partition
from dp_dask.data.schema import Schema

ORDER_KEY = "__dp_dask_order_key__"
_KEY_END = 2**63  # keys in [0, 2⁶³): int64
_TIES = 1  # the seed stream of the tie-breaking permutations (keys use stream 0)


def order_seed(noise_seed: int | None, stream: int = 0x0DE5) -> int:
    """The order's seed, drawn once per fit on the driver: 128 bits of OS entropy when the noise
    is unseeded (then it is as secret as the noise), else derived from ``noise_seed``
    (reproducible runs, like the noise itself); another ``stream`` for another step's seed."""
    if noise_seed is None:
        return secrets.randbits(128)
    return int(np.random.SeedSequence([int(noise_seed), stream]).generate_state(1, np.uint64)[0])


def order_record(noise_seed: int | None) -> str:
    """What a release records of the order: how it was drawn, never a secret seed."""
    seed = ("a secret seed (OS entropy)" if noise_seed is None
            else "a seed derived from noise_seed")
    return (f"the rows put in a uniformly random order (dp_dask.data.order), from {seed}, "
            "before any step that reads rows by position")


def _with_keys(frame: pd.DataFrame, seed: int, partition_info: dict | None = None
               ) -> pd.DataFrame:
    rng = np.random.default_rng([seed, 0, partition_info["number"]])
    return frame.assign(**{ORDER_KEY: rng.integers(0, _KEY_END, len(frame), dtype=np.int64)})


def _break_ties(frame: pd.DataFrame, seed: int, partition_info: dict | None = None
                ) -> pd.DataFrame:
    """One output partition, sorted by key: rows of equal keys in a uniformly random order."""
    keys = frame.index.to_numpy()
    rows = np.arange(len(frame))
    if len(keys) > 1 and np.any(keys[1:] == keys[:-1]):
        tiebreak = np.random.default_rng([seed, _TIES, partition_info["number"]]).permutation(
            len(frame))
        rows = np.lexsort((tiebreak, keys))
    return frame.iloc[rows].reset_index(drop=True)


def sort_by_key(keyed: dd.DataFrame, seed: int) -> dd.DataFrame:
    """``keyed``'s rows ordered by their ``ORDER_KEY`` column (int64 in [0, 2⁶³)), rows of equal
    keys in a uniformly random order, in as many partitions; the key column dropped."""
    parts = keyed.npartitions
    step = _KEY_END // parts
    divisions = [p * step for p in range(parts)] + [_KEY_END - 1]
    ordered = keyed.set_index(ORDER_KEY, divisions=divisions)
    return ordered.map_partitions(_break_ties, seed, meta=keyed._meta.drop(columns=ORDER_KEY))


def random_row_order(ddf: dd.DataFrame, seed: int) -> dd.DataFrame:
    """``ddf``'s rows in a uniformly random order (the module docstring), a function of the
    seed and the rows' multiset in distribution; the index is reset."""
    meta = ddf._meta.assign(**{ORDER_KEY: np.array([], dtype=np.int64)})
    return sort_by_key(ddf.map_partitions(_with_keys, seed, meta=meta), seed)


def codes_frame(ddf: dd.DataFrame, schema: Schema) -> dd.DataFrame:
    """Each partition's codes as a frame (rows, m), one column per attribute: what the
    positional methods reorder (codes are smaller than raw values and of one integer type, so
    the shuffle moves less and cannot change a value's type)."""
    meta = pd.DataFrame(np.empty((0, schema.m), dtype=code_dtype(schema)),
                        columns=[str(a) for a in range(schema.m)])
    return ddf.map_partitions(_codes, schema, meta=meta)


def _codes(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    return pd.DataFrame(encode_partition(frame, schema).T,
                        columns=[str(a) for a in range(schema.m)])


def frame_codes(frame: pd.DataFrame) -> np.ndarray:
    """The (m, rows) codes of one partition of :func:`codes_frame`."""
    return np.ascontiguousarray(frame.to_numpy().T)

"""Issue 65, the draft's budget by expected gain: each column's share of the draft's ε in
proportion to what its kind's search needs (dp_dask.data.draft_split), not equal, and the one
command's draft share (DRAFT_SHARE) as measured on real tables. Seeded; the tolerances are the
noise scales the draft records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dp_dask.data.draft import draft_schema
from dp_dask.data.draft_split import split_epsilon, text_total
from dp_dask.data.draft_text import WEIGHT_SCALE
from dp_dask.one_command import DRAFT_SHARE, split_budget
from dp_dask.synthesizer import DEFAULT_DELTA

ROWS = 20_000
NUMBERS = 9  # numeric columns beside the price
TEXTS = 3  # text columns, each with a level of SMALL_LEVEL rows beside a large one
SMALL_LEVEL = 2_600
TAIL_ROWS = 1_300  # the price's rows at or above 16,384 (2^14), up to 18,823
PRICE_MAX = 18_823
# the one command's draft at total ε = 1 (its DRAFT_SHARE of ε and δ)
DRAFT = split_budget(1.0, DEFAULT_DELTA, DRAFT_SHARE)["draft"]


def gain_frame(seed: int = 0) -> pd.DataFrame:
    """A diamonds-like table: :data:`TEXTS` text columns of two levels, the smaller one
    :data:`SMALL_LEVEL` rows (13 %); a price whose body lies below 16,000 (15 % of it in the
    octave [8,192, 16,384)) and whose tail of :data:`TAIL_ROWS` rows lies in [16,384, 18,823];
    and :data:`NUMBERS` numeric columns on one decimal."""
    rng = np.random.default_rng(seed)
    price = np.clip(np.round(rng.lognormal(8.2, 0.8, ROWS)), 326, 16_000)
    price[:TAIL_ROWS] = rng.integers(16_384, PRICE_MAX + 1, TAIL_ROWS)
    frame = {"price": price.astype(np.int64)}
    frame |= {f"t{i}": rng.permutation(np.repeat(["large", "small"],
                                                 [ROWS - SMALL_LEVEL, SMALL_LEVEL]))
              for i in range(TEXTS)}
    frame |= {f"n{i}": np.round(rng.normal(50 + 10 * i, 5 + i, ROWS), 1)
              for i in range(NUMBERS)}
    return pd.DataFrame(frame).sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.fixture(scope="module")
def drafted(tmp_path_factory) -> list:
    path = tmp_path_factory.mktemp("gain") / "gain.parquet"
    gain_frame().to_parquet(path)
    return [draft_schema(path, dp_epsilon=DRAFT["epsilon"], dp_delta=DRAFT["delta"],
                         ledger=False, noise_sampler="numpy", noise_seed=seed,
                         dataset_name="gain") for seed in range(3)]


@pytest.fixture(scope="module")
def drafts(drafted) -> list[dict]:
    return [draft.schema for draft in drafted]


def _attribute(schema: dict, name: str) -> dict:
    return next(a for a in schema["attributes"] if a["name"] == name)


def test_item_gain_price_tail_is_not_clamped_at_one_command_epsilon(drafts):
    """At the one command's draft ε the price's search buys its tail: the octave [16,384,
    32,768) joins the range where its noisy count passes the grow threshold, which its
    1,300 rows do with two noise scales to spare (probability 1 − e⁻²/2 ≈ 93 % at least; 3.6
    scales here), so its values are not clamped at 16,383. At a draft share of 0.3 with equal
    shares the threshold and two scales were 1,536 rows."""
    for schema in drafts:
        steps = schema["drafted_under_dp"]["mechanisms"]["price"]["steps"]
        octaves = next(step for step in steps if step["step"] == "octaves")
        assert octaves["grow_threshold"] + 2 * octaves["scale"] <= TAIL_ROWS, octaves
        assert float(_attribute(schema, "price")["max"]) >= 2**14, _attribute(schema, "price")


def test_item_gain_text_levels_get_their_need_beside_numeric_columns(drafts):
    """Three text columns beside ten numeric ones get ε together by their need at the noisy
    rows n̂ (a level of 1 % of n̂ passing the round that releases the small levels), within
    their proportional share and their columns' equal share (draft_split.text_total); the
    numeric columns share the rest in proportion to their needs. One mechanism over the three
    releases each column's 2,600-row level (draft_text): the first round where it passes, else
    the second with two noise scales to spare at the level's least weight, a row of three
    unreleased values (1/√3)."""
    for schema in drafts:
        drafted = schema["drafted_under_dp"]
        shares = drafted["split"]["epsilon"]
        needs = drafted["split"]["by_need"]["needs"]
        texts = [f"t{i}" for i in range(TEXTS)]
        assert math.fsum(shares[c] for c in texts) == pytest.approx(text_total(
            math.fsum(shares.values()), needs, texts, len(shares), drafted["rows"]["noisy"]))
        second = drafted["text"]["levels"]["rounds"][1]
        for column in texts:
            assert "small" in _attribute(schema, column)["categories"]
        # missed by the first round, a small level passes the second with two scales to spare
        assert second["threshold"] + 2 * second["scale"] <= \
            SMALL_LEVEL * WEIGHT_SCALE / math.sqrt(TEXTS), second
        assert shares["n0"] / shares["price"] == pytest.approx(needs["n0"] / needs["price"])
        # basic composition: the parts sum to the draft's ε
        split = drafted["split"]
        spent = split["rows"] + split["types"] + split["max_rows"] + sum(shares.values())
        assert spent <= DRAFT["epsilon"] * (1 + 1e-12)


def test_item_gain_the_notes_say_each_columns_share(drafted):
    """The draft's notes list each kind's ε per column and its columns (the record's
    split.epsilon), and point to the rule."""
    for draft in drafted:
        shares = draft.schema["drafted_under_dp"]["split"]["epsilon"]
        note = next(n for n in draft.notes if n.startswith("the draft's ε over the columns"))
        assert "split.by_need" in note
        assert f"text ε {shares['t0']:.3g} each: t0, t1, t2" in note
        assert f"number ε {shares['price']:.3g} each: price" in note


def test_item_gain_split_sums_to_at_most_the_draft_epsilon():
    """For random column mixes (texts, timestamps, numbers; δ; a unit's bound K; n̂) the shares
    are positive, sum to at most ε, and are equal within a kind."""
    rng = np.random.default_rng(65)
    for _ in range(200):
        width = int(rng.integers(1, 40))
        columns = [f"c{i}" for i in range(width)]
        kinds = rng.choice(["text", "time", "number"], width)
        texts = [c for c, k in zip(columns, kinds) if k == "text"]
        times = [c for c, k in zip(columns, kinds) if k == "time"]
        epsilon = float(rng.uniform(0.01, 5.0))
        delta = float(10 ** rng.uniform(-12, -4))
        rows = None if rng.random() < 0.3 else float(10 ** rng.uniform(0, 7))  # n̂
        shares = split_epsilon(epsilon, columns, texts, times, delta=delta,
                               bound=int(rng.integers(1, 6)), rows=rows)
        assert set(shares) == set(columns)
        assert all(s > 0 for s in shares.values())
        assert math.fsum(shares.values()) <= epsilon * (1 + 1e-12)
        for kind in ("text", "time", "number"):
            same = {shares[c] for c, k in zip(columns, kinds) if k == kind}
            assert len(same) <= 1 or max(same) == pytest.approx(min(same))

"""A users × events table of a known structure, for the unit-shaped release's tests and its
benchmark (benchmarks/units_shape.py loads this file: the tests never import benchmarks/)."""

from __future__ import annotations

import numpy as np
import pandas as pd

EVENTS_SCHEMA = {"name": "events", "attributes": [
    {"name": "country", "type": "categorical", "categories": list("abcde"), "unit_level": True},
    {"name": "plan", "type": "categorical", "categories": ["free", "paid"], "unit_level": True},
    {"name": "kind", "type": "categorical", "categories": ["view", "click", "buy"]},
    {"name": "amount", "type": "numeric", "edges": [0, 1, 2, 5, 10, 20, 50, 1000]},
    {"name": "hour", "type": "numeric", "edges": [0, 6, 12, 18, 24]},
]}


def events(users: int = 5_000, seed: int = 0) -> pd.DataFrame:
    """Users × events of a known structure: rows per user geometric (mean 4), country and
    plan per user, spend persistent within a user (a user level plus noise), events ordered by
    hour."""
    rng = np.random.default_rng(seed)
    sizes = rng.geometric(0.25, users)
    user = np.repeat(np.arange(users), sizes)
    level = rng.normal(0, 1, users)
    plan = np.where(level + rng.normal(0, 1, users) > 0.5, "paid", "free")
    amount = np.exp(1 + 0.8 * level[user] + 0.4 * rng.normal(0, 1, len(user)))
    kind = np.where(amount > 8, "buy", np.where(rng.random(len(user)) < 0.4, "click", "view"))
    hour = np.concatenate([np.sort(rng.uniform(0, 24, s)) for s in sizes])
    return pd.DataFrame({"user": user.astype(str),
                         "country": rng.choice(list("abcde"), users)[user],
                         "plan": plan[user], "kind": kind, "amount": amount, "hour": hour})

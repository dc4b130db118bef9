"""A release's budget split as a value, and its one rendering in words (issue 66).

Each method *builds* a :class:`BudgetSplit` of named fields (no prose): its parts (what each
measures, how many measurements, ε or ρ in all or each, the mechanism, the sensitivity, the
share rule, sub-parts), the public parameters of the split, the accountant and the closing
guarantee, and where the release's notion is not the ledger's, the ledger's replace-one charge.
The privacy record (:mod:`dp_dask.privacy.record`) stores it (``privacy.budget_parts``, as
JSON) and :func:`render_split` alone turns it into the metadata's ``budget_split`` prose, so the
words never say more or less than the value the audit reads back
(:meth:`BudgetSplit.from_json`). Modelled on google/dpsynth's budget split as named fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class BudgetPart:
    """One part of a budget split.

    ``measures``: what is measured (or, for a part of parts, what they make up); ``count``: how
    many measurements; ``symbol``: the budget's name in the method's paper ("epsilon1");
    ``epsilon``/``rho``: its charge in all, ``epsilon_each``/``rho_each``: each measurement's;
    ``share``: its fraction of the enclosing budget; ``mechanism``; ``norm`` and
    ``sensitivity`` (each measurement's), or ``sensitivity_rule`` where it is a formula of
    values not released (n, a stratum's rows); ``rule``: how its budget is shared among its
    measurements (with a charge each: the formula of that charge, "epsilon1/m"); ``scale``:
    the noise's scale on each count, ``scale_rule`` its formula; ``shares``: each
    measurement's share of the part, by that rule; ``note``: what else bounds it (the rows it
    reads, how strata compose); ``parts``: its own parts, in order."""

    measures: str
    count: int | None = None
    symbol: str | None = None
    epsilon: float | None = None
    rho: float | None = None
    epsilon_each: float | None = None
    rho_each: float | None = None
    share: float | None = None
    mechanism: str | None = None
    norm: str | None = None
    sensitivity: float | None = None
    sensitivity_rule: str | None = None
    rule: str | None = None
    scale: float | None = None
    scale_rule: str | None = None
    shares: tuple[float, ...] = ()
    note: str | None = None
    parts: tuple[BudgetPart, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The part's set fields, its parts as JSON too."""
        document = {f.name: getattr(self, f.name) for f in fields(self)
                    if getattr(self, f.name) not in (None, ())}
        if self.shares:
            document["shares"] = list(self.shares)
        if self.parts:
            document["parts"] = [p.to_json() for p in self.parts]
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BudgetPart:
        """The part a :meth:`to_json` record holds."""
        return cls(**{**document, "shares": tuple(document.get("shares", ())),
                      "parts": tuple(cls.from_json(p) for p in document.get("parts", ()))})


@dataclass(frozen=True)
class ReplaceOne:
    """An add/remove release's charge as the ledger counts it: ``rho`` under replace-
    ``replaced`` neighbours ("one row", or a unit's rows); ``tree_after_n``: a tree's
    selections, which tables="auto" may choose after the noisy n, are included."""

    rho: float
    replaced: str
    tree_after_n: bool = False


@dataclass(frozen=True)
class BudgetSplit:
    """How a release spends its budget, as values: ``parts`` in the order they are spent;
    ``parameters``: the split's public parameters (name: value); ``accountant``: what composes
    the parts (a composition theorem or an accountant's name); ``epsilon``/``delta``: the
    guarantee it gives the whole release (None: the split states none, as before a choice is
    made); ``replace_one``: the ledger's charge where the release's notion is another."""

    parts: tuple[BudgetPart, ...]
    accountant: str | None = None
    epsilon: float | None = None
    delta: float | None = None
    parameters: dict[str, float] = field(default_factory=dict)
    replace_one: ReplaceOne | None = None

    def to_json(self) -> dict[str, Any]:
        """The split as JSON (the metadata's ``budget_parts``)."""
        document = {"parts": [p.to_json() for p in self.parts], "accountant": self.accountant,
                    "epsilon": self.epsilon, "delta": self.delta,
                    "parameters": dict(self.parameters)}
        if self.replace_one is not None:
            document["replace_one"] = asdict(self.replace_one)
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BudgetSplit:
        """The split a ``budget_parts`` record holds (:meth:`to_json`'s inverse)."""
        replace_one = document.get("replace_one")
        return cls(tuple(BudgetPart.from_json(p) for p in document["parts"]),
                   document.get("accountant"), document.get("epsilon"),
                   document.get("delta"), dict(document.get("parameters", {})),
                   None if replace_one is None else ReplaceOne(**replace_one))


def render_split(split: BudgetSplit) -> str:
    """The split in words: every part, the parameters, the ledger's replace-one charge and the
    guarantee, where the split has them. The one place budget-split prose is written."""
    words = [_part(p, "the budget") for p in split.parts]
    if split.parameters:
        words.append(", ".join(f"{name} = {value:g}" for name, value in split.parameters.items()))
    if split.replace_one is not None:
        words.append(_replace_one(split.replace_one))
    if split.epsilon is not None:
        words.append(f"{_accountant(split.accountant)} gives ({split.epsilon:g}, "
                     f"{split.delta or 0.0:g})-DP")
    return "; ".join(words)


def _part(part: BudgetPart, whole: str = "it") -> str:
    """One part in words; its ``share`` as a fraction of ``whole``, the enclosing budget."""
    charge = ("" if part.epsilon is None and part.rho is None else
              f"epsilon {part.epsilon:.6g}" if part.rho is None else f"rho {part.rho:.6g}")
    if part.symbol is not None:
        charge = f"{part.symbol} = {part.epsilon if part.rho is None else part.rho:.6g}"
    if part.share is not None:
        share = f"{part.share:.6g} of {whole}"
        charge = f"{charge} ({share})" if charge else share
    what = f"{part.count} {part.measures}" if part.count is not None else part.measures
    how = [part.mechanism]
    norm = f"{part.norm} " if part.norm else ""
    if part.sensitivity is not None:
        how.append(f"{norm}sensitivity {part.sensitivity:.6g}"
                   + (" each" if part.count is not None else ""))
    if part.sensitivity_rule is not None:
        how.append(f"{norm}sensitivity {part.sensitivity_rule}")
    each = part.epsilon_each if part.rho_each is None else part.rho_each
    if each is not None:  # the rule names each measurement's charge
        unit = "epsilon" if part.rho_each is None else "rho"
        how.append(f"{part.rule or unit} = {each:.6g} each")
    elif part.rule is not None:
        how.append(part.rule)
    if part.scale is not None:
        how.append(f"scale {part.scale_rule} = {part.scale:.6g} per count" if part.scale_rule
                   else f"scale {part.scale:.6g} per count")
    if part.shares:
        how.append(f"shares = [{', '.join(f'{p:.4g}' for p in part.shares)}]")
    how.append(part.note)
    said = ", ".join(h for h in how if h)
    text = (f"{charge} to " if charge else "") + what + (f" ({said})" if said else "")
    if part.parts:
        text += ": " + ", ".join(_part(p) for p in part.parts)
    return text


def _replace_one(charge: ReplaceOne) -> str:
    return (f"rho {charge.rho:.6g} as replace {charge.replaced} (the ledger's notion): the "
            "Gaussian measurements at twice their rho, each exponential-mechanism "
            "selection at twice its score sensitivity (4 times its rho in zCDP)"
            + ("; a tree's selections included, which tables='auto' may choose after "
               "the noisy n" if charge.tree_after_n else ""))


def _accountant(accountant: str | None) -> str:
    """The accountant as the guarantee names it: a composition theorem by its name, an
    accountant ("exact", "zcdp") as "the ... accountant"."""
    if accountant is None or " " in accountant:
        return accountant or "composition"
    return f"the {accountant} accountant"

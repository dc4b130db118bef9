"""A release's privacy record as one value, rendered to metadata in one place (issue 66).

:class:`Cost` is what a release spends under one neighbouring notion: (ε, δ), the mechanism, the
accountant and, for Gaussian noise, the zCDP charge ρ. The privacy ledger records the release's
replace-one-row :class:`Cost` (``Entry.for_cost``), the metadata shows the same value
(``replace_one_row`` where the release's own notion is another), and the audit reads it back
(:meth:`PrivacyRecord.from_metadata`): one value, never recomputed from prose.

:class:`PrivacyRecord` holds the rest of what every release records (ε, δ, unit, notion,
mechanism, accountant, budget split: docs/privacy.md) and the method's own fields (its
measurements, each with its ρ or ε, its selection, post-processing), and
:meth:`PrivacyRecord.to_metadata` renders it: the only place a release's ``privacy`` metadata is
written, the claim (DP or not, and why) and the split's prefix for a choice of K included.

A model fitted inside a release (a unit-shaped release's unit model) keeps a record of its own
measurements, rendered by :meth:`PrivacyRecord.part_metadata` as a *part* of the release's: its
own charge and mechanism, the release's unit and neighbours, and how it composes into the
release's guarantee; never a claim of its own (a part alone guarantees nothing, and a row-level
claim inside a unit-level release would misstate what it protects).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dp_dask.privacy.accounting import ACCOUNTANTS, BASIC_COMPOSITION, epsilon_spent
from dp_dask.privacy.audit import epsilon_at_delta
from dp_dask.privacy.labels import NON_PRIVATE_LABEL, PRIVATE_SAMPLERS, privacy_claim
from dp_dask.privacy.split import BudgetSplit, render_split

# The fields of a Cost, as metadata and the ledger name them.
COST_FIELDS = ("epsilon", "delta", "mechanism", "accountant", "rho")


@dataclass(frozen=True)
class Cost:
    """What a release spends under one neighbouring notion. ``rho``: the zCDP charge of
    Gaussian noise (None for pure ε: its δ is 0 under basic composition)."""

    epsilon: float
    delta: float
    mechanism: str
    accountant: str
    rho: float | None = None

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any]) -> Cost:
        """The cost of a calibration ``plan`` (epsilon, delta, mechanism, accountant and, for
        Gaussian noise, rho: e.g. ``NoisePlan.to_json()``)."""
        gaussian = plan["mechanism"] == "gaussian"
        basic = plan["mechanism"] == "laplace" and plan["accountant"] == BASIC_COMPOSITION
        return cls(float(plan["epsilon"]), 0.0 if basic else float(plan["delta"]),
                   plan["mechanism"], plan["accountant"],
                   float(plan["rho"]) if gaussian and plan.get("rho") is not None else None)

    def epsilon_at(self, delta: float) -> float:
        """The ε this cost claims at ``delta``: from ρ on its accountant's curve where there is
        one, else the curve every (ε, δ₀)-DP mechanism lies below."""
        if self.rho and self.accountant in ACCOUNTANTS:
            return epsilon_spent(self.rho, delta, self.accountant)
        return epsilon_at_delta(self.epsilon, self.delta, delta)


@dataclass(frozen=True)
class PrivacyRecord:
    """Everything a release records about its privacy, as values.

    ``cost``: under the release's own notion (``neighbouring``, in words); ``charge``: under
    replace-one rows, what the ledger counts, where it differs (an add/remove release);
    ``unit``: the privacy unit's record (dp_dask.data.units.unit_record); ``rho_split``: ρ by
    part where a choice of K spent a share first; ``details``: the method's own fields, in
    order (its measurements with their ρ or ε, selection, post-processing); ``split``: the
    budget split as a value (dp_dask.privacy.split), rendered as ``budget_parts`` and, in
    words, ``budget_split``; ``draft``: the schema's drafting under DP; ``one_command``: the
    one command's split of its (ε, δ) between the draft and the release, and the columns it
    left out (dp_dask.one_command; None for a release of its own); ``types_from_data``: the
    columns whose types came from the data; ``label``: a notion's own label for a release
    that is not a synthesizer's (dp-dask stats), None for the synthesizers' claim;
    ``with_rho``: whether the metadata holds ``rho`` even when it is None (a synthesizer's
    does; dp-dask stats' never did, and its releases stay as they were). What the whole
    release is charged and given (the ledger's replace-one charge where the release's notion
    is another, the (ε, δ) its accountant gives) closes the split, which a part's record
    (:meth:`part_metadata`) leaves to the release's."""

    cost: Cost
    neighbouring: str
    unit: dict[str, Any]
    noise_sampler: str
    noise_seeded: bool
    charge: Cost | None = None
    rho_split: dict[str, float] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    split: BudgetSplit | None = None
    draft: dict[str, Any] | None = None
    one_command: dict[str, Any] | None = None
    types_from_data: Any = None
    label: str | None = None
    with_rho: bool = True

    @property
    def ledger_cost(self) -> Cost:
        """What the ledger counts: the replace-one-row cost."""
        return self.charge or self.cost

    def cost_under(self, notion: str) -> Cost:
        """The cost under neighbours ``notion`` ("replace": the ledger's; else the release's)."""
        return self.ledger_cost if notion == "replace" else self.cost

    def budget_split(self) -> str | None:
        """The split in words (:func:`~dp_dask.privacy.split.render_split`), after the choice
        of K's share where there was one."""
        if self.split is None:
            return None
        split = render_split(self.split)
        if "max_rows_choice" not in (self.rho_split or {}):
            return split
        return (f"rho {self.rho_split['max_rows_choice']:.6g} to choosing max_rows "
                f"(privacy_unit.auto), then rho {self.rho_split['measurements']:.6g} to the "
                f"measurements: {split}")

    def to_metadata(self) -> dict[str, Any]:
        """The release's ``privacy`` metadata: the one rendering of the record."""
        cost = self.cost
        rendered: dict[str, Any] = {"epsilon": cost.epsilon, "delta": cost.delta,
                                    "mechanism": cost.mechanism, "accountant": cost.accountant}
        if self.with_rho or cost.rho is not None:
            rendered["rho"] = cost.rho
        if self.rho_split:
            rendered["rho_split"] = dict(self.rho_split)
        if self.charge is not None:
            rendered["replace_one_row"] = {"epsilon": self.charge.epsilon,
                                           "rho": self.charge.rho}
        rendered |= self.details
        if self.split is not None:
            rendered |= {"budget_split": self.budget_split(),
                         "budget_parts": self.split.to_json()}
        rendered |= {"noise_sampler": self.noise_sampler, "noise_seeded": self.noise_seeded,
                     "neighbouring": self.neighbouring, "privacy_unit": self.unit}
        if self.types_from_data:
            rendered["schema_types_from_data"] = self.types_from_data
        if self.draft:
            rendered["schema_drafted_under_dp"] = self.draft
        if self.one_command is not None:
            rendered["one_command"] = self.one_command
        return rendered | self._claim(rendered)

    def part_metadata(self, part: str, release: PrivacyRecord) -> dict[str, Any]:
        """This record as the ``privacy`` metadata of ``part``, a model fitted inside
        ``release`` (whose record it is one term of): its own charge (ρ and its share of the
        release's, or ε where it has no ρ), mechanism and measurements, under the release's
        neighbours and unit, and how it composes into the release's guarantee. No claim of its
        own (no ``differentially_private``, no (ε, δ) of its own): the part's charge is one
        term of the release's, which alone holds, and only for the release's unit."""
        cost, whole = self.cost, release.cost
        charge = ({"rho": cost.rho, "rho_share": cost.rho / whole.rho}
                  if cost.rho is not None and whole.rho else {"epsilon": cost.epsilon})
        term = (f"rho {cost.rho:.6g} is one term of the release's rho {whole.rho:.6g}"
                if "rho" in charge else f"epsilon {cost.epsilon:g} is one term of the "
                f"release's epsilon {whole.epsilon:g}")
        held = (f"({whole.epsilon:g}, {whole.delta:g})-DP" if self.noise_sampler
                in PRIVATE_SAMPLERS else f"the noise scale of a nominal ({whole.epsilon:g}, "
                f"{whole.delta:g}) (seeded noise: no guarantee)")
        composes = (f"one part of the release, no guarantee on its own: its {term} (the "
                    f"release's rho_split), which the {whole.accountant} accountant turns into "
                    f"{held} for the whole release under its neighbours ({release.neighbouring})"
                    "; the release's own privacy record states it")
        rendered: dict[str, Any] = {"part": part, **charge, "mechanism": cost.mechanism,
                                    "accountant": cost.accountant, **self.details}
        if self.split is not None:  # the release's charge and guarantee are the release's
            split = replace(self.split, epsilon=None, delta=None, replace_one=None)
            rendered |= {"budget_split": f"{render_split(split)}; one part of the release: "
                                         "see composes_into", "budget_parts": split.to_json()}
        return rendered | {"noise_sampler": self.noise_sampler,
                           "noise_seeded": self.noise_seeded,
                           "neighbouring": release.neighbouring, "privacy_unit": release.unit,
                           "composes_into": composes}

    def _claim(self, rendered: dict[str, Any]) -> dict[str, Any]:
        """Whether the release is DP, and why (not): a synthesizer's claim
        (labels.privacy_claim), or a notion's own label (``label``)."""
        if self.label is None:
            return privacy_claim(self.noise_sampler, rendered)
        if self.noise_sampler in PRIVATE_SAMPLERS:
            return {"label": self.label}
        return {"differentially_private": False,
                "label": f"{NON_PRIVATE_LABEL}: ε gives the noise scale only"}

    @classmethod
    def from_metadata(cls, privacy: Mapping[str, Any]) -> PrivacyRecord:
        """The record a release's ``privacy`` metadata renders (:meth:`to_metadata`'s inverse):
        the costs, notion, unit, budget split and one command's split as values; the method's
        own fields (the claim included) as rendered. A release whose claim has no ``reason``
        is a notion's own label (dp-dask stats'); one without ``rho``, without it."""
        cost = Cost(float(privacy["epsilon"]), float(privacy.get("delta", 0.0)),
                    privacy.get("mechanism", ""), privacy.get("accountant", ""),
                    privacy.get("rho"))
        charge = privacy.get("replace_one_row")
        known = {*COST_FIELDS, "rho_split", "replace_one_row", "noise_sampler", "noise_seeded",
                 "neighbouring", "privacy_unit", "schema_types_from_data",
                 "schema_drafted_under_dp", "one_command",
                 *(("budget_parts", "budget_split") if "budget_parts" in privacy else ())}
        parts = privacy.get("budget_parts")
        return cls(cost, privacy.get("neighbouring", ""), privacy.get("privacy_unit") or {},
                   privacy.get("noise_sampler", ""), bool(privacy.get("noise_seeded")),
                   charge=None if charge is None else Cost(
                       float(charge["epsilon"]), cost.delta, cost.mechanism, cost.accountant,
                       charge.get("rho")),
                   rho_split=privacy.get("rho_split"),
                   details={k: v for k, v in privacy.items() if k not in known},
                   split=None if parts is None else BudgetSplit.from_json(parts),
                   draft=privacy.get("schema_drafted_under_dp"),
                   one_command=privacy.get("one_command"),
                   types_from_data=privacy.get("schema_types_from_data"),
                   label=None if "reason" in privacy else privacy.get("label"),
                   with_rho="rho" in privacy)

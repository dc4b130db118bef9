"""What a model or release may claim about its privacy, in its metadata and in the CLI output.

Only noise from the OpenDP samplers (OS entropy) makes a release differentially private. The
numpy sampler is seeded, for tests and research: anyone who knows or guesses the seed can subtract
the noise, so such a release is labelled non-private wherever its ε and δ are shown.
"""

from __future__ import annotations

from typing import Any

PRIVATE_SAMPLERS = ("opendp",)
NON_PRIVATE_LABEL = "NON-PRIVATE TEST RELEASE (seeded noise)"
OWNER_ONLY = "not differentially private — for the data owner only"
# Neighbouring datasets, as a release records them: dp_dask's notion, and the peers' (MST, AIM),
# which the default method offers as an option.
NEIGHBOURING = {"replace": "replace one row; n public",
                "add_remove": "add or remove one row; n private, estimated from the noisy counts"}


def privacy_claim(sampler: str, privacy: dict[str, Any]) -> dict[str, Any]:
    """Fields to merge into a model's ``privacy`` metadata: whether it is DP, and why (not)."""
    if sampler in PRIVATE_SAMPLERS:
        return {"differentially_private": True,
                "label": "differentially private release",
                "reason": f"noise from OpenDP's samplers with OS entropy; {privacy['accountant']}"}
    return {"differentially_private": False,
            "label": NON_PRIVATE_LABEL,
            "reason": f"noise from the {sampler} sampler (tests and research only): anyone who "
                      "knows or guesses its seed can remove the noise, and its floating-point "
                      "samplers are not hardened; epsilon and delta give the noise scale only, "
                      "not a guarantee",
            "budget_split": "NOT A GUARANTEE (seeded noise); noise calibrated as follows: "
                            + privacy.get("budget_split", "")}


def is_private(privacy: dict[str, Any]) -> bool:
    """Whether a model's ``privacy`` metadata claims DP (older models: by their noise sampler)."""
    if "differentially_private" in privacy:
        return bool(privacy["differentially_private"])
    return privacy.get("noise_sampler") in PRIVATE_SAMPLERS


def describe(privacy: dict[str, Any]) -> str:
    """One line for the CLI: the (ε, δ) guarantee of a release, or its non-private label, and
    its neighbouring datasets where they are not dp_dask's (replace one row)."""
    if is_private(privacy):
        line = (f"released with ε={privacy['epsilon']}, δ={privacy['delta']:.3g}, "
                f"{privacy['mechanism']} ({privacy['accountant']})")
    else:
        line = (f"{NON_PRIVATE_LABEL}: not differentially private; {privacy['mechanism']} noise "
                f"from the seeded {privacy.get('noise_sampler', 'numpy')} sampler, scaled for a "
                f"nominal ε={privacy['epsilon']}, δ={privacy['delta']:.3g} (no guarantee)")
    unit = privacy.get("privacy_unit")  # absent from releases made before units
    if "replace_one_row" in privacy:
        one = "row" if unit is None or unit["unit"] == "row" else "unit"
        line += (f"; neighbours: {privacy['neighbouring']} (as replace one {one}: "
                 f"ε={privacy['replace_one_row']['epsilon']:.4g})")
    if unit is not None:
        line += ("; privacy unit: a row (a person with many rows is protected less)"
                 if unit["unit"] == "row" else
                 f"; privacy unit: {unit['unit']!r}, at most {unit['max_rows']} rows each")
    return line

"""What an attack label says: the attack it names (without its `@<design>` reference suffix), its family, its threat
model as the attack declared it at registration, and which label is the attack under test."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd

from attacks.errors import AttackConfigError
from attacks.registry import get_attack


REFERENCE_DESIGN_SEP = "@"
"""An attack label '<attack>@<design>' is that attack with another reference design (leakaudit.scoring:
'@offline' = the domain's offline references)."""


def attack_base(label: str) -> str:
    """'leaky@offline' -> 'leaky': the attack a label names, whichever references it used."""
    return str(label).split(REFERENCE_DESIGN_SEP, 1)[0]


def default_family(attack: str) -> str:
    """Family when scores.parquet has no `family` column: blind_* -> blind, fresh-trajectory names -> fresh (either
    reference design: 'leaky@offline' is fresh as 'leaky' is)."""
    attack = attack_base(attack)
    if attack.startswith("blind"):
        return "blind"
    if attack == "leaky" or attack.startswith(("fresh", "same_traj", "mean_gap", "gap_")):
        return "fresh"
    return "fixed"


def threat_model(attack_name: str, params: str | dict | None = None) -> str:
    """'OUT-only', 'IN+OUT' or 'check' (attacks.registry.THREAT_MODELS) of a registered attack and its parameters
    (a JSON string or a dict), as the attack declared it at registration; 'unknown' for an attack this version does
    not register (scores written by another version or by hand)."""
    try:
        spec = get_attack(attack_base(attack_name))
    except AttackConfigError:
        return "unknown"
    if isinstance(params, str):
        params = json.loads(params or "{}")
    known = {f.name for f in dataclasses.fields(spec.params_cls)}
    return spec.threat_model_of({k: v for k, v in (params or {}).items() if k in known})


def with_threat_model(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (normalise_scores' columns) with a `threat_model` column, looked up once per (attack, params)."""
    name = df["attack_name"] if "attack_name" in df else df["attack"].map(attack_base)
    keys = list(zip(name.astype(str), df["params"].astype(str)))
    cache = {k: threat_model(*k) for k in set(keys)}
    return df.assign(threat_model=[cache[k] for k in keys])


def primary_leaky(labels) -> str | None:
    """The attack under test: Leaky with offline references when the run has them (the published design: references
    trained without any candidate), else with the study's matched OUT references; None without a Leaky row."""
    labels = set(map(str, labels))
    for label in (f"leaky{REFERENCE_DESIGN_SEP}offline", "leaky"):
        if label in labels:
            return label
    return None

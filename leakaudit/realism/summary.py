"""Reading a realism card: the report's table rows and the one-line summary of the study log."""

from __future__ import annotations

from typing import Any, Mapping

from leakaudit.realism.definitions import DEGENERATE_REPETITION


def _get(d: Mapping | None, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


QUALITY_HEADLINE = {"math": "final_answer_match", "medical": "label_match", "code": "similarity"}
"""The metric of each domain's measure the table and summary line show (code also shows parses)."""


def card_rows(card: Mapping[str, Any]) -> list[dict]:
    """One flat row per target, then one per domain pooled over its real targets: training set, KL and entropy
    (nats/token; all / members / non-members), sample length, empty and distinct fractions, and the domain's
    quality metric on held-out records and on members (code also parse rate). Missing values are None."""
    def row(name, domain, null, training, lv, sampling):
        metric = QUALITY_HEADLINE.get(domain)
        out = {"target": name, "domain": domain, "null_check": null,
               "trained": _get(training, "n_records"), "members": _get(training, "n_members"),
               "background": _get(training, "n_background"), "passes": _get(training, "epochs"),
               "steps": _get(training, "steps"), "member_fraction": _get(training, "member_fraction"),
               "kl_per_token": _get(lv, "all", "kl", "per_token"),
               "kl_members": _get(lv, "members", "kl", "per_token"),
               "kl_non_members": _get(lv, "non_members", "kl", "per_token"),
               "kl_per_sequence": _get(lv, "all", "kl", "per_sequence"),
               "entropy_per_token": _get(lv, "all", "entropy", "per_token"),
               "mean_tokens": _get(lv, "all", "samples", "mean_tokens"),
               "empty_fraction": _get(lv, "all", "samples", "empty_fraction"),
               "distinct_fraction": _get(lv, "all", "samples", "distinct_fraction"),
               "seq_rep_4": _get(lv, "all", "samples", "seq_rep_4"),
               "quality_metric": metric,
               "quality_held_out": _get(lv, "held_out", "quality", metric) if metric else None,
               "quality_members": _get(lv, "members", "quality", metric) if metric else None,
               "parses_held_out": _get(lv, "held_out", "quality", "parses") if domain == "code" else None,
               "temperature": _get(sampling, "temperature"), "top_p": _get(sampling, "top_p")}
        return out

    rows = [row(t["target"], t["domain"], t["null_check"], t["training"], t["levels"], t["sampling"])
            for t in card.get("targets", [])]
    samp = {t["domain"]: t["sampling"] for t in card.get("targets", []) if not t["null_check"] and t["sampling"]}
    rows += [row(f"pooled ({v['n_targets']} real targets)", d, False, None, v["levels"], samp.get(d))
             for d, v in (card.get("domains") or {}).items()]
    return rows


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def summary_line(card: Mapping[str, Any] | None) -> str:
    """One line: per domain (pooled over its real targets) the training set sizes and passes, KL(target || base)
    and entropy in nats/token, the held-out task quality; and how many targets were sampled off temperature 1."""
    if not card or not card.get("measured"):
        return f"realism card: not measured ({(card or {}).get('reason') or 'no realism.json'})"
    parts = []
    targets = card.get("targets", [])
    for domain, v in (card.get("domains") or {}).items():
        real = [t for t in targets if t["target"] in v["targets"] and t["training"]]
        sizes = sorted({t["training"]["n_records"] for t in real})
        passes = sorted({t["training"]["epochs"] for t in real if t["training"]["epochs"] is not None})
        size = "?" if not sizes else str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        lv = v["levels"]
        metric = QUALITY_HEADLINE.get(domain)
        quality = (f", held-out {metric} {_fmt(_get(lv, 'held_out', 'quality', metric))}" if metric else "")
        n = v["n_targets"]
        # an audit's target was trained elsewhere: its plan records no training set, so say so instead of "?"
        trained = (f"trained on {size} records x {'/'.join(map(str, passes)) or '?'} passes" if sizes
                   else "training not recorded here (a given target)")
        parts.append(f"{domain} ({n} target{'s' if n != 1 else ''}): {trained}, KL(target||base) "
                     f"{_fmt(_get(lv, 'all', 'kl', 'per_token'))} nats/token, entropy "
                     f"{_fmt(_get(lv, 'all', 'entropy', 'per_token'))} nats/token, distinct samples "
                     f"{_fmt(_get(lv, 'all', 'samples', 'distinct_fraction'))}{quality}")
        rep = _get(lv, "all", "samples", "seq_rep_4")
        if rep is not None and rep >= DEGENERATE_REPETITION:
            parts.append(f"{domain}: the targets' samples loop (seq-rep-4 {rep:.3f} >= {DEGENERATE_REPETITION}: "
                         "most 4-grams repeat an earlier one), degenerate targets whose attack results say little")
    biased = [t["target"] for t in targets if t["sampling"] and not t["sampling"]["unbiased"]]
    if biased:
        parts.append(f"{len(biased)} target(s) sampled at temperature/top_p != 1 (estimates biased)")
    return "realism card: " + ("; ".join(parts) if parts else "no target has fresh samples")

"""A realism card for the targets of a finished run: are the attacked students plausible models, or
degenerate ones?

Computed from what a finished run already stores; no model is loaded or run, and nothing a model wrote is ever
executed (code samples are only parsed with ``ast.parse``). Per attacked target (``plan.views()``: each student,
an audit's target, each null student, labelled with ``null_check`` and ``label_source``):

- ``training``: from ``models/<id>/meta.json``: records trained on (``len(record_ids)``), how many are candidates
  (its members), population records, background records (meta ``n_background`` when it records it, else counted:
  trained records that are neither candidates nor population), passes (``epochs``), optimizer steps (``steps``)
  and members as a fraction of the training set. None for a model the run did not train (an audit's target).
- ``sampling``: the fresh trajectories' sampling parameters (``signals/fresh/<target>/sampling.json``) and
  whether the Monte-Carlo estimates below are unbiased (temperature 1 and top_p 1 only).
- per level (``all``, ``members``, ``non_members``: the view's labels, ``plan.labels(view.label_source)``; a
  null target's "members" are its label source's; ``held_out``: candidates the target never trained on, by its
  meta.json's record_ids, else its non-members, all candidates for a null target):
  * ``kl``: KL(target || base) estimated on the target's own stored samples, both models scoring every token
    (``logp__<target>.npz``, ``logp__base.npz``): ``per_token`` = sum over sampled tokens of
    (log p_target - log p_base) / number of tokens (nats/token), ``per_sequence`` = the mean over trajectories of
    that sum (nats/sequence). Sign: > 0 when the target prefers its samples over the base, as a KL does.
  * ``entropy``: -sum log p_target / number of tokens (nats/token) and -mean per-trajectory sum (nats/sequence):
    the Monte-Carlo estimate of the target's entropy.
    Both estimates are E_{y ~ sampler}[...]: they equal KL(target || base) and H(target) only when the sampler is
    the target itself, i.e. temperature 1 and top_p 1 (``sampling.unbiased``; the card flags other settings).
    Trajectories with a NaN log-prob (a model that did not score them) are left out and counted.
  * ``samples``: mean length in tokens, fraction of zero-length trajectories, fraction at the token cap
    (``max_new_tokens``), fraction whose decoded text is blank, the mean over records of (distinct
    trajectories / trajectories): a degenerate target emits one sample whatever it is asked; and ``seq_rep_4``,
    the mean over trajectories of 1 - distinct 4-grams / 4-grams of its token ids (seq-rep-n, Welleck et al. 2020):
    a target stuck in a loop ("Clinical note for patient X: Clinical note for patient X: ...") scores near 1,
    fluent 48-token text near 0. At DEGENERATE_REPETITION or more the summary line says the samples loop.
  * ``quality``: task quality of the decoded samples (the run's tokenizer, study.yaml's base_model; special
    tokens skipped, as leakaudit.literalness.sample_literalness decodes), by domain through ``QUALITY``: math
    final-answer match, medical label match, code similarity to the canonical body and parse check (definitions
    in ``QUALITY``). Mean over records of the mean over a record's samples. The headline is ``held_out``: records
    the target never trained on. A domain without a measure gets None and a reason.
  The base model's task quality is not available: its samples are not stored (``BASE_QUALITY``); it is not run.
- ``domains``: the same levels pooled over each domain's real (not null) targets.

`realism_card(run_root)` builds the card, `summary_line(card)` one line of it, `card_rows(card)` the report's
table rows, `load(run_root)` reads ``realism.json``.
"""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from leakaudit.data.hub_math import last_boxed
from leakaudit.data.records import Record
from leakaudit.errors import InputError, LeakauditError

LEVELS = ("all", "members", "non_members", "held_out")
REPEAT_N = 4
"""n of the seq-rep-n repetition measure (samples.seq_rep_4)."""
DEGENERATE_REPETITION = 0.5
"""Pooled seq-rep-4 from which the summary line calls a domain's samples a loop: half of every sample's 4-grams
repeat an earlier one (natural text of this length has almost none; the medical copying-teacher students of run
MO0, which repeat one line, score 0.61-0.71)."""
BASE_QUALITY = ("not available: the run stores no samples of the base model (signals/fresh/ holds the targets' "
                "samples only), and the card runs no model")
ESTIMATE_NOTE = ("Monte-Carlo estimates on the target's own stored samples: E_{y ~ sampler}[log p_target(y) - "
                 "log p_base(y)] and E[-log p_target(y)]; unbiased for KL(target || base) and the target's entropy "
                 "only when the sampler is the target (temperature 1, top_p 1)")
DEFINITIONS = {
    "kl.per_token": "sum over sampled tokens of (log p_target - log p_base) / tokens, nats/token",
    "kl.per_sequence": "mean over trajectories of sum over its tokens of (log p_target - log p_base), nats",
    "entropy.per_token": "-sum over sampled tokens of log p_target / tokens, nats/token",
    "entropy.per_sequence": "-mean over trajectories of sum over its tokens of log p_target, nats",
    "estimates": ESTIMATE_NOTE,
    "samples.distinct_fraction": "mean over records of distinct token sequences / trajectories",
    "samples.empty_fraction": "trajectories whose decoded text (special tokens skipped) is blank",
    "samples.at_cap_fraction": "trajectories with max_new_tokens tokens (cut off by the cap)",
    "samples.seq_rep_4": "mean over trajectories of 4 tokens or more of 1 - distinct 4-grams / 4-grams of the "
                         "token ids (seq-rep-4; 0 = no 4-gram repeats, near 1 = a loop)",
    "quality": "mean over records of the mean over the record's samples of the domain's measure",
    "held_out": "candidates the target never trained on (meta.json record_ids; else its non-members; every "
                "candidate of a null target)",
}


# ---------------------------------------------------------------- small helpers
def _r(x: float | None, digits: int = 4) -> float | None:
    """Rounded float, None for None / NaN / inf (realism.json stays strict JSON)."""
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def _finite_pairs(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(a_i, b_i) pairs of equal-length float arrays with no NaN in either."""
    out = []
    for x, y in zip(a, b):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if len(x) != len(y):
            raise ValueError(f"log-prob arrays of one trajectory differ in length: {len(x)} vs {len(y)}")
        if np.isfinite(x).all() and np.isfinite(y).all():
            out.append((x, y))
    return out


# ---------------------------------------------------------------- Monte-Carlo estimates over stored log-probs
def kl_estimate(logp_target: Sequence[np.ndarray], logp_base: Sequence[np.ndarray]) -> dict:
    """KL(target || base) on the target's samples. logp_target / logp_base: per trajectory, float [T_i] log-probs
    of the same sampled tokens (aligned). Returns {per_token: sum_i sum_t (lt - lb) / sum_i T_i (nats/token),
    per_sequence: mean_i sum_t (lt - lb) (nats), n_trajectories, n_tokens, n_skipped (a NaN in either)};
    None values without a usable trajectory (per_token also without a token)."""
    pairs = _finite_pairs(logp_target, logp_base)
    sums = [float((x - y).sum()) for x, y in pairs]
    n_tok = sum(len(x) for x, _ in pairs)
    return {"per_token": _r(sum(sums) / n_tok) if n_tok else None,
            "per_sequence": _r(float(np.mean(sums))) if sums else None,
            "n_trajectories": len(pairs), "n_tokens": int(n_tok), "n_skipped": len(logp_target) - len(pairs)}


def entropy_estimate(logp_target: Sequence[np.ndarray]) -> dict:
    """Entropy of the target from its own samples. logp_target: per trajectory, float [T_i]. Returns {per_token:
    -sum_i sum_t lt / sum_i T_i (nats/token), per_sequence: -mean_i sum_t lt (nats), n_trajectories, n_tokens,
    n_skipped}; >= 0 for log-probs <= 0."""
    pairs = _finite_pairs(logp_target, logp_target)
    sums = [float(-x.sum()) for x, _ in pairs]
    n_tok = sum(len(x) for x, _ in pairs)
    return {"per_token": _r(sum(sums) / n_tok) if n_tok else None,
            "per_sequence": _r(float(np.mean(sums))) if sums else None,
            "n_trajectories": len(pairs), "n_tokens": int(n_tok), "n_skipped": len(logp_target) - len(pairs)}


def distinct_fraction(trajs: Sequence[np.ndarray]) -> float | None:
    """Distinct token sequences / trajectories of one record, in (0, 1]; None for no trajectory."""
    if not len(trajs):
        return None
    return len({tuple(np.asarray(t).tolist()) for t in trajs}) / len(trajs)


def seq_rep(tokens: np.ndarray, n: int = REPEAT_N) -> float | None:
    """1 - distinct n-grams / n-grams of one trajectory's token ids, in [0, 1); None below n tokens (no n-gram).
    Written here: seq-rep-n is a few lines over token ids, and no dependency of ours ships it."""
    t = np.asarray(tokens).tolist()
    grams = [tuple(t[i:i + n]) for i in range(len(t) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else None


def sample_stats(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """Over `records` (each {"tokens": [int arrays], "texts": [str] | None}): n_records, n_trajectories, mean_tokens,
    zero_length_fraction, at_cap_fraction (None without max_new_tokens), empty_fraction (decoded text blank; None
    without texts), distinct_fraction (mean over records), seq_rep_4 (mean over trajectories of REPEAT_N tokens or
    more; None without one)."""
    lengths = [len(t) for r in records for t in r["tokens"]]
    reps = [x for x in (seq_rep(t) for r in records for t in r["tokens"]) if x is not None]
    texts = [s for r in records for s in (r["texts"] or [])]
    have_texts = bool(records) and all(r["texts"] is not None for r in records)
    distinct = [d for d in (distinct_fraction(r["tokens"]) for r in records) if d is not None]
    n = len(lengths)
    return {"n_records": len(records), "n_trajectories": n,
            "mean_tokens": _r(float(np.mean(lengths)), 2) if n else None,
            "zero_length_fraction": _r(sum(x == 0 for x in lengths) / n) if n else None,
            "at_cap_fraction": _r(sum(x >= max_new_tokens for x in lengths) / n) if n and max_new_tokens else None,
            "empty_fraction": _r(sum(not s.strip() for s in texts) / len(texts)) if have_texts and texts else None,
            "distinct_fraction": _r(float(np.mean(distinct))) if distinct else None,
            "seq_rep_4": _r(float(np.mean(reps))) if reps else None}


# ---------------------------------------------------------------- math: final-answer match
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)\s*:?\s*([^\n]+)", re.IGNORECASE)
_LEADING_NUMBER = re.compile(rf"(?:{_NUMBER.pattern})(?=\s+[^\W\d_]|%|$)")
"""A number that starts an answer and is followed by a word, '%' or nothing ('1,000 apples'; not '2^(n-1)')."""
_ALTERNATIVES = re.compile(r",\s*or\s+(?:equivalently|approximately|an equivalent form such as)?\s*", re.IGNORECASE)


def extract_final_answer(text: str) -> str | None:
    r"""The sample's final answer: the last \boxed{...}; else what follows the last "answer is" / "answer:" /
    "answer =" on its line (cut at the first ". " sentence end); else the last number (integers, decimals,
    thousands commas, a/b, a leading minus). None when there is none."""
    text = text.replace("\u2212", "-")
    boxed = last_boxed(text)
    if boxed:
        return boxed
    said = list(_ANSWER_IS.finditer(text))
    if said:
        rest = re.split(r"\.\s", said[-1].group(1), maxsplit=1)[0].strip().rstrip(".").strip()
        if rest:
            return rest
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalise_answer(s: str) -> str:
    r"""Lower case without spaces, $, **, \left / \right, a trailing '.', a leading 'x =' (one letter), and
    thousands commas in a plain number; \dfrac / \tfrac -> \frac."""
    s = s.replace("\u2212", "-").lower().strip()
    for junk in ("$", "**", "\\left", "\\right", "\\!", "\\,", " "):
        s = s.replace(junk, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").rstrip(".")
    s = re.sub(r"^[a-z]=(?=.)", "", s)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    return s


def as_number(s: str) -> float | None:
    r"""The value of a normalised answer that is a plain number, a/b or \frac{a}{b}; None otherwise."""
    s = normalise_answer(s)
    m = re.fullmatch(r"\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s) or re.fullmatch(
        r"(-?\d+(?:\.\d+)?)/(-?\d+(?:\.\d+)?)", s)
    try:
        if m:
            den = float(m.group(2))
            return float(m.group(1)) / den if den else None
        return float(s)
    except ValueError:
        return None


def answer_forms(answer: str) -> list[str]:
    """The accepted forms of an answer: CHAMP writes alternatives as 'X, or equivalently Y' / ', or approximately
    Y' / ', or an equivalent form such as Y' (leakaudit.data.champ); split there."""
    return [p.strip() for p in _ALTERNATIVES.split(answer) if p.strip()]


def answers_agree(a: str, b: str) -> bool:
    """Equal after normalise_answer, or both numbers within 1e-6 (relative) of each other."""
    if normalise_answer(a) == normalise_answer(b):
        return True
    x, y = as_number(a), as_number(b)
    return x is not None and y is not None and abs(x - y) <= 1e-6 * max(1.0, abs(x), abs(y))


def final_answer_match(sample: str, answer: str) -> bool:
    """True when the sample's extracted final answer (extract_final_answer) agrees with any form of `answer`; a
    number the extracted text starts with, followed by a word or nothing, counts as one of its forms ('1,000
    apples' -> '1,000')"""
    said = extract_final_answer(sample)
    if said is None:
        return False
    forms = answer_forms(said)
    lead = _LEADING_NUMBER.match(said.replace("\u2212", "-").lstrip("$ "))
    if lead:
        forms.append(lead.group(0))
    return any(answers_agree(s, a) for s in forms for a in answer_forms(answer))


# ---------------------------------------------------------------- medical: label match
def _label_pattern(label: str) -> re.Pattern:
    """`label` as a whole word / phrase (no word character on either side); case-insensitive, except a one-letter
    label (a multiple-choice letter), matched in its own case so the article 'a' is not option A."""
    return re.compile(r"(?<!\w)" + re.escape(label) + r"(?!\w)", 0 if len(label) == 1 else re.IGNORECASE)


def named_label(text: str, labels: Sequence[str]) -> str | None:
    """The label the text names last: the occurrence that ends last, the longer on a tie, so a label inside a
    longer one never wins over it ('diabetes' inside 'no diabetes', 'hypothyroidism' inside 'primary
    hypothyroidism'). None when no label occurs."""
    spans = [(m.end(), m.end() - m.start(), lab) for lab in dict.fromkeys(labels)
             for m in _label_pattern(lab).finditer(text)]
    return max(spans)[2] if spans else None


def label_match(sample: str, answer: str, labels: Sequence[str]) -> bool:
    """True when the label the sample names last (named_label over `labels`, which should hold `answer`) is
    `answer`, compared case-insensitively."""
    said = named_label(sample, list(labels) if answer in labels else [*labels, answer])
    return said is not None and said.lower() == answer.lower()


# ---------------------------------------------------------------- code: similarity and parse check
def code_similarity(sample: str, body: str) -> float:
    """difflib.SequenceMatcher(None, sample, body, autojunk=False).ratio() over the whole texts, in [0, 1]."""
    return difflib.SequenceMatcher(None, sample, body, autojunk=False).ratio()


def _unfenced(sample: str) -> str:
    """The inside of the first ``` fenced block (to its end if unclosed); the sample itself without a fence."""
    m = re.search(r"```[^\n]*\n(.*?)(?:```|\Z)", sample, re.DOTALL)
    return m.group(1) if m else sample


def parses_as_python(sample: str) -> bool:
    """Whether the sample (its first fenced block if it has one), dedented, is Python that ``ast.parse`` accepts
    (a body's top-level ``return`` parses). Only parsed: nothing is compiled or executed. Blank: False."""
    code = textwrap.dedent(_unfenced(sample))
    if not code.strip():
        return False
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- the per-domain table
@dataclass(frozen=True)
class QualityMeasure:
    """A task-quality measure of one domain. applies(record): whether the record has what it needs;
    context(records): whatever the measure needs from the run's records of the domain (computed once);
    score(sample, record, context): {metric: value in [0, 1]} for one decoded sample (higher = better)."""

    definition: dict[str, str]
    applies: Callable[[Record], bool]
    score: Callable[[str, Record, Any], dict[str, float]]
    context: Callable[[Sequence[Record]], Any] = lambda records: None


def _medical_labels(records: Sequence[Record]) -> dict[str, list[str]]:
    """source -> its distinct answers (the label set a sample is matched against)."""
    out: dict[str, list[str]] = {}
    for r in records:
        if r.answer:
            out.setdefault(r.source, [])
            if r.answer not in out[r.source]:
                out[r.source].append(r.answer)
    return out


QUALITY: dict[str, QualityMeasure] = {
    "math": QualityMeasure(
        definition={"final_answer_match": "extract_final_answer(sample) (last \\boxed{}, else after the last "
                                          "'answer is'/'answer:', else the last number; or the number it starts "
                                          "with) agrees with record.answer (any of its ', or equivalently' forms) "
                                          "after normalisation, or numerically within 1e-6"},
        applies=lambda r: bool(r.answer),
        score=lambda s, r, ctx: {"final_answer_match": float(final_answer_match(s, r.answer))}),
    "medical": QualityMeasure(
        definition={"label_match": "the label the sample names last, as a whole word or phrase, case-insensitive "
                                   "(one-letter labels in their own case), among the distinct answers of the "
                                   "record's source (a label inside a longer one never wins over it), is "
                                   "record.answer; surface matching: a negated mention counts as naming it"},
        applies=lambda r: bool(r.answer),
        score=lambda s, r, ctx: {"label_match": float(label_match(s, r.answer, ctx.get(r.source, [r.answer])))},
        context=_medical_labels),
    "code": QualityMeasure(
        definition={"similarity": "difflib.SequenceMatcher(None, sample, record.privileged, autojunk=False)"
                                  ".ratio() over the whole sample and the whole canonical body",
                    "parses": "the sample (its first ``` block if fenced), dedented, is accepted by ast.parse "
                              "(never executed)"},
        applies=lambda r: bool(r.privileged.strip()),
        score=lambda s, r, ctx: {"similarity": code_similarity(s, r.privileged),
                                 "parses": float(parses_as_python(s))}),
}
"""domain -> its task-quality measure; a domain not listed gets quality None with a reason."""


def quality_summary(records: Sequence[dict]) -> dict | None:
    """Over `records` (each {"quality": {metric: [value per sample]} | None}): {metric: mean over the records that
    have it of the mean of its samples' values, "n_records": records measured}; None when none is measured."""
    measured = [r["quality"] for r in records if r["quality"]]
    if not measured:
        return None
    metrics = list(dict.fromkeys(k for q in measured for k in q))
    out: dict = {m: _r(float(np.mean([np.mean(q[m]) for q in measured if q.get(m)]))) for m in metrics}
    out["n_records"] = len(measured)
    return out


# ---------------------------------------------------------------- one target
def training_set(meta: Mapping[str, Any] | None, candidates: Sequence[str], population: Sequence[str]) -> dict | None:
    """What a model trained on, from its meta.json (None without one): n_records (len(record_ids)), n_members
    (record_ids that are candidates), n_population, n_background (meta's n_background when recorded, else the
    rest), background_source, epochs (passes), steps (optimizer steps; None when not recorded), member_fraction."""
    if meta is None or meta.get("record_ids") is None:
        return None
    trained = list(dict.fromkeys(meta["record_ids"]))
    cands, pop = set(candidates), set(population)
    n_members = sum(r in cands for r in trained)
    n_pop = sum(r in pop for r in trained)
    recorded = meta.get("n_background")
    n_bg = int(recorded) if recorded is not None else len(trained) - n_members - n_pop
    return {"n_records": len(trained), "n_members": n_members, "n_population": n_pop, "n_background": n_bg,
            "background_source": "meta.json n_background" if recorded is not None
            else "counted: trained records neither candidate nor population",
            "epochs": meta.get("epochs"), "steps": meta.get("steps"),
            "member_fraction": _r(n_members / len(trained)) if trained else None}


def sampling_info(meta: Mapping[str, Any] | None) -> dict | None:
    """The sampling parameters of sampling.json's config (None without one) and whether the card's Monte-Carlo
    estimates are unbiased (temperature == 1 and top_p == 1), with a warning when they are not."""
    if meta is None:
        return None
    cfg = meta.get("config") or {}
    t, p = cfg.get("temperature", 1.0), cfg.get("top_p", 1.0)
    unbiased = float(t) == 1.0 and float(p) == 1.0
    return {"temperature": t, "top_p": p, "n_per_record": cfg.get("n_per_record"),
            "max_new_tokens": cfg.get("max_new_tokens"), "seed": cfg.get("seed"), "unbiased": unbiased,
            "warning": None if unbiased else (f"sampled at temperature {t}, top_p {p}: the KL and entropy "
                                              "estimates are of the sampler's distribution, not the target's")}


def level_summary(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """kl, entropy, samples and quality over `records` (rows of `target_rows`): kl over the records whose target
    and base log-probs are stored, entropy over those with the target's (None when there are none)."""
    both = [r for r in records if r["logp_target"] is not None and r["logp_base"] is not None]
    have_t = [r for r in records if r["logp_target"] is not None]
    kl = kl_estimate([x for r in both for x in r["logp_target"]], [x for r in both for x in r["logp_base"]])
    return {"kl": kl if both else None,
            "entropy": entropy_estimate([x for r in have_t for x in r["logp_target"]]) if have_t else None,
            "samples": sample_stats(records, max_new_tokens), "quality": quality_summary(records)}


def levels(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """LEVELS -> level_summary over the records of that level (None for a level without records)."""
    pick = {"all": lambda r: True, "members": lambda r: r["is_member"] is True,
            "non_members": lambda r: r["is_member"] is False, "held_out": lambda r: r["held_out"] is True}
    out = {}
    for name in LEVELS:
        rows = [r for r in records if pick[name](r)]
        out[name] = level_summary(rows, max_new_tokens) if rows else None
    return out


def target_rows(fresh_dir: Path, target: str, base_id: str, labels: Mapping[str, bool], held_out: Callable,
                records: Mapping[str, Record], decode: Callable | None, measure: QualityMeasure | None,
                context: Any) -> list[dict]:
    """One row per record with stored fresh trajectories: record_id, is_member (bool | None), held_out, tokens
    [n int arrays], logp_target / logp_base ([n float arrays] | None when not stored), texts ([n str] | None
    without a tokenizer), quality ({metric: [n values]} | None)."""
    from leakaudit.signals.store import has_logp, load_logp, load_trajectories

    trajs = load_trajectories(fresh_dir)
    lt = load_logp(fresh_dir, target) if has_logp(fresh_dir, target) else None
    lb = load_logp(fresh_dir, base_id) if has_logp(fresh_dir, base_id) else None
    rows = []
    for rid, toks in trajs.items():
        texts = decode(toks) if decode is not None else None
        rec = records.get(rid)
        quality = None
        if texts is not None and measure is not None and rec is not None and measure.applies(rec):
            scored = [measure.score(s, rec, context) for s in texts]
            quality = {k: [q[k] for q in scored] for k in (scored[0] if scored else {})} or None
        rows.append({"record_id": rid, "is_member": labels.get(rid), "held_out": held_out(rid), "tokens": toks,
                     "logp_target": lt.get(rid) if lt is not None else None,
                     "logp_base": lb.get(rid) if lb is not None else None, "texts": texts, "quality": quality})
    return rows


# ---------------------------------------------------------------- the card
def _read_json(path: Path) -> dict | None:
    from leakaudit.io import read_json

    try:
        return read_json(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _tokenizer_loader(config: Mapping[str, Any], tokenizer: Any) -> Callable[[], tuple[Any, str | None]]:
    """A function returning (tokenizer | None, why not): the given one, else study.yaml's base_model's, loaded
    on first use (leakaudit.models.load_tokenizer) and kept."""
    cache: dict[str, tuple[Any, str | None]] = {}

    def get() -> tuple[Any, str | None]:
        if tokenizer is not None:
            return tokenizer, None
        if "tok" not in cache:
            ref = config.get("base_model")
            if not ref:
                cache["tok"] = (None, "study.yaml names no base_model: samples not decoded")
            else:
                from leakaudit.models import load_tokenizer

                try:
                    cache["tok"] = (load_tokenizer(str(ref), trust_remote_code=bool(config.get("trust_remote_code"))),
                                    None)
                except (LeakauditError, OSError, ValueError, ImportError) as e:
                    cache["tok"] = (None, f"tokenizer of {ref} not loadable ({type(e).__name__}: {e}): samples "
                                          "not decoded")
        return cache["tok"]

    return get


def _decoder(tokenizer: Any) -> Callable[[Sequence[np.ndarray]], list[str]]:
    """Token arrays -> texts, special tokens skipped (how leakaudit.literalness.sample_literalness decodes)."""
    return lambda toks: [tokenizer.decode(list(map(int, t)), skip_special_tokens=True) for t in toks]


def _held_out_fn(view: Any, labels: Mapping[str, bool], meta: Mapping | None, candidates: set) -> Callable:
    """record_id -> True when the target never trained on it (a candidate outside meta.json's record_ids; without
    meta: a null target's every candidate, else a non-member), None when unknown."""
    if meta is not None and meta.get("record_ids") is not None:
        trained = set(meta["record_ids"])
        return lambda rid: (rid not in trained) if rid in candidates else None
    if view.null_check:
        return lambda rid: True if rid in candidates else None
    return lambda rid: (not labels[rid]) if rid in labels else None


def target_card(run: Any, plan: Any, view: Any, records: Mapping[str, Record],
                get_tokenizer: Callable) -> tuple[dict, list[dict]]:
    """(the card entry of one TargetView, its record rows for pooling). Missing inputs give None fields and a
    `notes` entry, never an error."""
    from leakaudit.assemble import BASE_ID
    from leakaudit.signals.store import has_logp, has_trajectories

    domain = view.domain
    candidates = list(plan.candidates.get(domain, []))
    meta = _read_json(run.model(view.target) / "meta.json")
    labels = plan.labels(view.label_source) if view.label_source in plan.models else {}
    entry: dict = {"target": view.target, "domain": domain, "null_check": bool(view.null_check),
                   "label_source": view.label_source,
                   "training": training_set(meta, candidates, plan.population.get(domain, [])),
                   "sampling": None, "levels": {name: None for name in LEVELS}, "quality_measure": None, "notes": []}
    if entry["training"] is None:
        entry["notes"].append(f"no models/{view.target}/meta.json with record_ids (a model this run did not train, "
                              "or an unfinished one): training set not known")
    fresh = run.fresh(view.target)
    if not has_trajectories(fresh):
        entry["notes"].append(f"no fresh trajectories in signals/fresh/{view.target}: KL, entropy and quality not "
                              "measured")
        return entry, []
    entry["sampling"] = sampling_info(_read_json(fresh / "sampling.json"))
    for model_id, what in ((view.target, "KL and entropy"), (BASE_ID, "KL")):
        if not has_logp(fresh, model_id):
            entry["notes"].append(f"no logp__{model_id}.npz in signals/fresh/{view.target}: {what} not measured")
    measure = QUALITY.get(domain)
    tok, why = get_tokenizer()
    if measure is None:
        entry["notes"].append(f"no task-quality measure for domain {domain!r} (measures: {', '.join(QUALITY)})")
    elif tok is None:
        entry["notes"].append(why)
    else:
        entry["quality_measure"] = measure.definition
    context = measure.context([r for r in records.values() if r.domain == domain]) if measure else None
    try:
        rows = target_rows(fresh, view.target, BASE_ID, labels, _held_out_fn(view, labels, meta, set(candidates)),
                           records, _decoder(tok) if tok is not None else None, measure, context)
    except InputError as e:
        entry["notes"].append(f"signals/fresh/{view.target} not readable ({e}): KL, entropy and quality not "
                              "measured")
        return entry, []
    cap = (entry["sampling"] or {}).get("max_new_tokens")
    entry["levels"] = levels(rows, cap)
    return entry, rows


def realism_card(run_root: str | Path, *, tokenizer: Any = None) -> dict:
    """The realism card of a finished run (module docstring): {"definitions", "base_quality", "measured",
    "reason", "targets": [per TargetView], "domains": {domain: {"n_targets", "targets", "levels"}} pooled over
    the domain's real targets}. `tokenizer` decodes the samples (default: study.yaml's base_model's, loaded only
    when a target has fresh trajectories). Reads the run only; runs no model."""
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import PLAN_FILE, MembershipPlan
    from leakaudit.rundir import RunDir
    from leakaudit.yamlio import read_yaml

    run = RunDir(Path(run_root))
    card: dict = {"definitions": DEFINITIONS, "base_quality": BASE_QUALITY, "measured": False, "reason": None,
                  "targets": [], "domains": {}}
    if not (run.membership.is_file() and (run.plan_dir / PLAN_FILE).is_file()):
        card["reason"] = "no membership plan (membership.parquet, plan.json): no targets to describe"
        return card
    plan = MembershipPlan.load(run.plan_dir)
    config = (read_yaml(run.config) or {}) if run.config.is_file() else {}
    try:
        records = {r.record_id: r for r in read_jsonl(run.records)}
    except LeakauditError:
        records = {}
    get_tokenizer = _tokenizer_loader(config, tokenizer)
    pooled: dict[str, dict] = {}
    for view in plan.views():
        entry, rows = target_card(run, plan, view, records, get_tokenizer)
        if not records and rows:
            entry["notes"].append("no records.jsonl: task quality not measured")
        card["targets"].append(entry)
        if not view.null_check and rows:
            acc = pooled.setdefault(view.domain, {"targets": [], "rows": [], "cap": None})
            acc["targets"].append(view.target)
            acc["rows"] += rows
            acc["cap"] = acc["cap"] or (entry["sampling"] or {}).get("max_new_tokens")
    card["domains"] = {d: {"n_targets": len(v["targets"]), "targets": v["targets"],
                           "levels": levels(v["rows"], v["cap"])} for d, v in sorted(pooled.items())}
    card["measured"] = True
    return card


# ---------------------------------------------------------------- reading it
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
        parts.append(f"{domain} ({n} target{'s' if n != 1 else ''}): trained on {size} records x "
                     f"{'/'.join(map(str, passes)) or '?'} passes, KL(target||base) "
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


def load(run_root: str | Path) -> dict | None:
    """realism.json of a run directory; None when the run has none (built before the card existed)."""
    from leakaudit.rundir import RunDir

    return _read_json(RunDir(Path(run_root)).realism)

"""How literal a run's teacher is, and how literal its targets became.

Two measurements, each written by the stage that has its inputs (docs/contracts.md, "Literalness"):

- `teacher_literalness` (teacher stage, ``teacher_literalness.json``): for each candidate, the teacher's mean
  per-token log p (nats/token) of the privileged text + EOS after the teacher prompt (prompt + privileged, the
  context it sees during OPD) and after the student prompt (no context), and the same for the record's
  restatement (leakaudit.data.restate) where a rule restates it. A copying teacher puts the privileged text at
  ≈ 0 nats/token with its context (README: −0.001 vs −0.369 without for the code teacher prepared on 96
  records); a restated teacher should prefer its restatement. Candidates are what the students are trained on
  and the attacks score; the teacher never trained on them.
- `sample_literalness` (attacks stage, ``sample_literalness.json``): for each target and candidate, the mean over
  the target's stored fresh trajectories of `similarity` (difflib's ratio between the decoded sample and the
  start of the privileged text, cut to the sample's length in characters, ``autojunk=False``: the definition
  of experiments/sample_overlap.py, whose numbers the README quotes), members vs non-members, with the AUROC of that
  similarity as a membership score; also against the restatement. No model is run.

`summary_line` turns both into one line for a log or a report; `load` reads them from a run directory.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from leakaudit.data.records import Record
from leakaudit.data.restate import restatement
from leakaudit.prompting import continuation_ids, student_prompt_ids, teacher_prompt_ids

TEACHER_DEFINITION = ("mean over a record's tokens (the text + EOS) of log p_teacher, nats/token; with_context: "
                      "after the teacher prompt (prompt + privileged, training.teacher_template), without_context: "
                      "after the student prompt; privileged = the privileged text, restated = "
                      "leakaudit.data.restate's restatement (records a rule restates); over the candidates")
SIMILARITY_DEFINITION = ("difflib.SequenceMatcher(None, sample, reference[:len(sample)], autojunk=False).ratio() "
                         "of the decoded sample (special tokens skipped) against the start of the reference text, "
                         "mean over a record's fresh trajectories (experiments/sample_overlap.py's definition)")


def _mean_logp(scores) -> list[float]:
    return [float(np.mean(s.logp)) if len(s.logp) else float("nan") for s in scores]


def _nanmean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None and np.isfinite(v)]
    return round(float(np.mean(kept)), 4) if kept else None


def teacher_literalness(backend: Any, tokenizer: Any, records: Sequence[Record], template: str) -> dict:
    """Per record and per domain: the teacher's (`backend`, a leakaudit.signals Backend) mean log p of the
    privileged text and of its restatement, with and without the privileged context (module docstring)."""
    records = list(records)
    with_ctx = [teacher_prompt_ids(tokenizer, r, template) for r in records]
    without = [student_prompt_ids(tokenizer, r) for r in records]
    privileged = [continuation_ids(tokenizer, r.privileged) for r in records]
    restated = [restatement(r) for r in records]
    idx = [i for i, x in enumerate(restated) if not x.is_verbatim]
    restated_ids = [continuation_ids(tokenizer, restated[i].text) for i in idx]
    p_ctx = _mean_logp(backend.score(with_ctx, privileged))
    p_no = _mean_logp(backend.score(without, privileged))
    r_ctx = dict(zip(idx, _mean_logp(backend.score([with_ctx[i] for i in idx], restated_ids)))) if idx else {}
    r_no = dict(zip(idx, _mean_logp(backend.score([without[i] for i in idx], restated_ids)))) if idx else {}
    per_record = {}
    for i, r in enumerate(records):
        per_record[r.record_id] = {
            "domain": r.domain, "restate_rule": restated[i].rule,
            "privileged_with_context": round(p_ctx[i], 4), "privileged_without_context": round(p_no[i], 4),
            "restated_with_context": round(r_ctx[i], 4) if i in r_ctx else None,
            "restated_without_context": round(r_no[i], 4) if i in r_no else None}
    domains = {}
    for domain in sorted({r.domain for r in records}):
        rows = [v for v in per_record.values() if v["domain"] == domain]
        summary = {key: _nanmean([v[key] for v in rows]) for key in (
            "privileged_with_context", "privileged_without_context", "restated_with_context",
            "restated_without_context")}
        gain = (None if summary["privileged_with_context"] is None or summary["privileged_without_context"] is None
                else round(summary["privileged_with_context"] - summary["privileged_without_context"], 4))
        domains[domain] = {"n_records": len(rows), "n_restated": sum(v["restated_with_context"] is not None
                                                                    for v in rows),
                           **summary, "privileged_context_gain": gain}
    return {"definition": TEACHER_DEFINITION, "records": "candidates", "domains": domains, "per_record": per_record}


def measure_teacher(teacher_ref: str, tokenizer: Any, records: Sequence[Record], template: str, *,
                    backend: str = "transformers", **backend_options: Any) -> dict:
    """`teacher_literalness` of a teacher given by reference (a prepared teacher's directory, the base, a hub
    id), loaded through leakaudit.signals.backend.open_backend with `backend_options` (score_batch_size, ...)."""
    from leakaudit.signals.backend import open_backend

    with open_backend(backend, teacher_ref, **backend_options) as b:
        return teacher_literalness(b, tokenizer, records, template)


def similarity(sample: str, reference: str) -> float:
    """difflib ratio in [0, 1] between `sample` and the first len(sample) characters of `reference`."""
    return difflib.SequenceMatcher(None, sample, reference[:max(len(sample), 1)], autojunk=False).ratio()


def auroc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Probability that a member scores above a non-member (ties count half); None without both classes."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=float)
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return round(float(greater / (len(pos) * len(neg))), 4)


def _group_summary(rows: list[dict]) -> dict:
    members = [r for r in rows if r["is_member"] is True]
    non = [r for r in rows if r["is_member"] is False]
    out = {"n_records": len(rows), "n_members": len(members), "n_non_members": len(non),
           "all": _nanmean([r["privileged"] for r in rows]),
           "members": _nanmean([r["privileged"] for r in members]),
           "non_members": _nanmean([r["privileged"] for r in non]),
           "auroc": auroc([r["is_member"] for r in members + non], [r["privileged"] for r in members + non]),
           "restated_members": _nanmean([r["restated"] for r in members]),
           "restated_non_members": _nanmean([r["restated"] for r in non])}
    return out


def sample_literalness(run: Any, plan: Any, records: dict[str, Record], tokenizer: Any) -> dict:
    """Similarity of every target's fresh samples to the privileged text (and to its restatement), members vs
    non-members, per target and pooled over the real (not null) targets. `run` a RunDir, `plan` its
    MembershipPlan, `records` by id."""
    from leakaudit.signals.store import load_trajectories

    restated = {}
    rows: list[dict] = []
    targets = {}
    for view in plan.views():
        labels = plan.labels(view.label_source)
        target_rows = []
        for rid, trajs in load_trajectories(run.fresh(view.target)).items():
            rec = records[rid]
            if rid not in restated:
                x = restatement(rec)
                restated[rid] = None if x.is_verbatim else x.text
            texts = [tokenizer.decode(list(t), skip_special_tokens=True) for t in trajs]
            row = {"target": view.target, "record_id": rid, "null_check": bool(view.null_check),
                   "is_member": bool(labels[rid]) if rid in labels else None,
                   "privileged": round(float(np.mean([similarity(s, rec.privileged) for s in texts])), 4)
                   if texts else None,
                   "restated": round(float(np.mean([similarity(s, restated[rid]) for s in texts])), 4)
                   if texts and restated[rid] is not None else None}
            target_rows.append(row)
        rows += target_rows
        targets[view.target] = {"domain": view.domain, "null_check": bool(view.null_check),
                                "label_source": view.label_source, **_group_summary(target_rows)}
    real = [r for r in rows if not r["null_check"]]
    return {"similarity": SIMILARITY_DEFINITION, "targets": targets,
            "pooled_real_targets": {"n_targets": sum(not t["null_check"] for t in targets.values()),
                                    **_group_summary(real)},
            "per_record": rows}


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def summary_line(teacher: dict | None, samples: dict | None) -> str:
    """One line: which teacher, its log p of the privileged text with vs without context per domain (and of
    the restatement with context), and the targets' sample similarity to the privileged text."""
    parts = []
    if teacher is not None:
        name = teacher.get("teacher", "?")
        target = teacher.get("sft_target")
        head = f"teacher {name}" + (f" (SFT target: {target})" if target else "")
        doms = "; ".join(
            f"{d} {_fmt(v['privileged_with_context'])} with context vs {_fmt(v['privileged_without_context'])} "
            f"without (restated {_fmt(v['restated_with_context'])} with context)"
            for d, v in teacher.get("domains", {}).items())
        parts.append(f"{head}: log p/token of the privileged text: {doms}")
    if samples is not None:
        p = samples["pooled_real_targets"]
        if p["n_members"] and p["n_non_members"]:
            parts.append(f"target samples vs privileged text (difflib): members {_fmt(p['members'])}, non-members "
                         f"{_fmt(p['non_members'])}, AUROC {_fmt(p['auroc'])} over {p['n_targets']} targets")
        else:
            parts.append(f"target samples vs privileged text (difflib): {_fmt(p['all'])} (no labels)")
    return "; ".join(parts) if parts else "no literalness measured"


def load(run_root: str | Path) -> tuple[dict | None, dict | None]:
    """(teacher_literalness.json, sample_literalness.json) of a run directory; None for a file it lacks (runs
    made before the measurement existed)."""
    from leakaudit.io import read_json
    from leakaudit.rundir import RunDir

    run = RunDir(Path(run_root))
    return tuple(read_json(p) if p.is_file() else None for p in (run.teacher_literalness, run.sample_literalness))

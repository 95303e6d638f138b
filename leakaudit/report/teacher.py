"""Which teacher a run used and how literal it was ("every run's report names which teacher it used and
measures how literal it was").

Inputs, all written by earlier stages (so the report stage's marker needs nothing new: they are in the teacher
and attacks stages' output digests):
- the teacher kind: ``teacher_literalness.json["teacher"]`` when the run wrote it, else ``study.yaml``'s
  ``teacher.kind`` (config default 'self');
- for a teacher the run prepared (kind 'prepared' or 'restated'): how many records it was fine-tuned on, from
  ``models/_teacher/meta.json`` (``n_records``, ``n_records_given``, ``left_out_record_ids``), else from
  ``teacher_literalness.json["sft"]`` (the same keys, copied by the teacher stage);
- the literalness measurements of leakaudit.literalness (``teacher_literalness.json``,
  ``sample_literalness.json``); a run made before they existed reports "not measured in this run".

`teacher_info` and `literalness_tables` are plain data (for metrics.json and the notebooks), `teacher_section`
the HTML, `teacher_lines` the text `leakaudit run-study` / `report` print under the headline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from leakaudit.io import read_json
from leakaudit.report import html as H
from leakaudit.rundir import RunDir

NOT_MEASURED = "not measured in this run"
PREPARED_KINDS = ("prepared", "restated", "plan")
"""teacher.kind values of a teacher the run prepared: shadow_models.config.PREPARED_TEACHERS' keys, written out
because that module imports torch and the report reads stored runs without it (tests/test_teacher_plan.py checks the
two agree)."""
TEACHER_KINDS = {
    "self": "self-distillation: the frozen base student",
    "prepared": "copying: the base fine-tuned to reproduce the privileged text from its context",
    "restated": "non-copying: the base fine-tuned to answer from its context in another surface form "
                "(leakaudit.data.restate)",
    "plan": "non-copying: the base fine-tuned to answer from its context with a plan in English, a code body's "
            "steps without its code (leakaudit.data.code_plan)",
}
"""teacher.kind -> what that teacher is; any other kind is a model reference (a hub id or a directory)."""
DEFAULT_KIND = "self"
"""TeacherConfig.kind's default: a study.yaml without a teacher key ran with it."""


def _read(path: Path) -> dict | None:
    try:
        return read_json(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def teacher_info(run_dir: str | Path, config: dict | None = None,
                 teacher_lit: dict | None = None) -> dict:
    """The run's teacher: `kind`, `description`, `model` (what the students distilled from), `sft_target`, and for a
    prepared teacher `n_records` (fine-tuned on), `n_records_given`, `n_left_out` and `source` (the file the counts
    come from; None when neither file has them). `config` is study.yaml (read when None), `teacher_lit`
    teacher_literalness.json (read when None)."""
    rd = RunDir(Path(run_dir))
    if config is None:
        from leakaudit.yamlio import read_yaml

        config = (read_yaml(rd.config) or {}) if rd.config.is_file() else {}
    if teacher_lit is None:
        teacher_lit = _read(rd.teacher_literalness)
    section = (config or {}).get("teacher")
    cfg_kind = section.get("kind") if isinstance(section, dict) else section
    kind = str((teacher_lit or {}).get("teacher") or cfg_kind or DEFAULT_KIND)
    prepared = kind in PREPARED_KINDS
    model = (teacher_lit or {}).get("teacher_model") or (
        "base" if kind == "self" else "models/_teacher" if prepared else kind)
    out = {"kind": kind, "description": TEACHER_KINDS.get(kind, "a model reference: hub id or directory"),
           "model": model, "sft_target": (teacher_lit or {}).get("sft_target"), "prepared": prepared,
           "n_records": None, "n_records_given": None, "n_left_out": None, "source": None}
    if prepared:
        meta = _read(rd.teacher / "meta.json")
        sft = (teacher_lit or {}).get("sft") or {}
        src, name = (meta, "models/_teacher/meta.json") if meta and "n_records" in meta else (
            (sft, "teacher_literalness.json") if "n_records" in sft else ({}, None))
        if name:
            out.update(n_records=int(src["n_records"]), source=name,
                       n_records_given=int(src["n_records_given"]) if src.get("n_records_given") is not None
                       else None,
                       n_left_out=len(src.get("left_out_record_ids") or []))
            out["sft_target"] = out["sft_target"] or (meta or {}).get("sft_target")
    return out


def teacher_phrase(info: dict) -> str:
    """One sentence naming the teacher and, for a prepared one, how many records it was prepared on."""
    text = f"Teacher: {info['kind']} ({info['description']})"
    if info["prepared"]:
        if info["n_records"] is None:
            text += "; prepared on an unrecorded number of records (no models/_teacher/meta.json)"
        else:
            text += f"; prepared on {info['n_records']} records (never a candidate)"
            given, left = info["n_records_given"], info["n_left_out"]
            if given is not None and given != info["n_records"]:
                text += f" of {given} given, {left} left out (no restatement rule)"
    return text + "."


def _nanmean(values: Sequence) -> float:
    kept = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(kept)) if kept else float("nan")


def _num(x) -> float:
    return float("nan") if x is None else float(x)


TEACHER_COLUMNS = {"privileged_with_context": "log p privileged, with context",
                   "privileged_without_context": "log p privileged, without context",
                   "privileged_context_gain": "gain (with - without)",
                   "restated_with_context": "log p restated, with context",
                   "restated_without_context": "log p restated, without context"}
SAMPLE_COLUMNS = {"members": "similarity, members", "non_members": "similarity, non-members", "auroc": "AUROC",
                  "restated_members": "similarity to restated, members",
                  "restated_non_members": "similarity to restated, non-members"}


def teacher_table(teacher_lit: dict) -> pd.DataFrame:
    """Per domain and over all candidates ("all": the mean over candidates of each candidate's mean log p per
    token, from per_record), the teacher's log p of the privileged text (and its restatement) with vs without
    context."""
    rows = []
    for domain, v in (teacher_lit.get("domains") or {}).items():
        rows.append({"domain": domain, "candidates": int(v.get("n_records") or 0),
                     "restated": int(v.get("n_restated") or 0), **{c: _num(v.get(k)) for k, c in
                                                                  TEACHER_COLUMNS.items()}})
    recs = list((teacher_lit.get("per_record") or {}).values())
    if recs:
        all_row = {k: _nanmean([r.get(k) for r in recs]) for k in TEACHER_COLUMNS if k != "privileged_context_gain"}
        all_row["privileged_context_gain"] = all_row["privileged_with_context"] - all_row["privileged_without_context"]
        rows.append({"domain": "all", "candidates": len(recs),
                     "restated": sum(r.get("restated_with_context") is not None for r in recs),
                     **{c: all_row[k] for k, c in TEACHER_COLUMNS.items()}})
    return pd.DataFrame(rows)


def sample_table(sample_lit: dict) -> pd.DataFrame:
    """Per target and pooled over the real targets: similarity of the target's fresh samples to the privileged
    text, members vs non-members, and its AUROC as a membership score."""
    rows = []

    def row(target, domain, null, v):
        return {"target": target, "domain": domain, "null_check": bool(null),
                "members n": int(v.get("n_members") or 0), "non-members n": int(v.get("n_non_members") or 0),
                **{c: _num(v.get(k)) for k, c in SAMPLE_COLUMNS.items()}}

    for target, v in (sample_lit.get("targets") or {}).items():
        rows.append(row(target, v.get("domain", ""), v.get("null_check"), v))
    pooled = sample_lit.get("pooled_real_targets")
    if pooled:
        rows.append(row(f"pooled ({int(pooled.get('n_targets') or 0)} real targets)", "all", False, pooled))
    return pd.DataFrame(rows)


def literalness_summary(teacher_lit: dict | None, sample_lit: dict | None) -> dict:
    """The headline numbers: over all candidates, the teacher's mean log p of the privileged text with and without
    context; pooled over the real targets, the samples' similarity for members and non-members and its AUROC.
    None for a measurement the run lacks."""
    out: dict = {"teacher": None, "samples": None}
    if teacher_lit is not None:
        t = teacher_table(teacher_lit)
        if not t.empty:
            r = t.iloc[-1]
            out["teacher"] = {"candidates": int(r["candidates"]),
                              "with_context": float(r[TEACHER_COLUMNS["privileged_with_context"]]),
                              "without_context": float(r[TEACHER_COLUMNS["privileged_without_context"]])}
    if sample_lit is not None and sample_lit.get("pooled_real_targets"):
        p = sample_lit["pooled_real_targets"]
        out["samples"] = {"n_targets": int(p.get("n_targets") or 0), "members": p.get("members"),
                          "non_members": p.get("non_members"), "auroc": p.get("auroc"), "all": p.get("all")}
    return out


def _f(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.3f}"


def literalness_phrases(teacher_lit: dict | None, sample_lit: dict | None) -> tuple[str, str]:
    """(teacher sentence, samples sentence), each "... not measured in this run" when its file is absent."""
    s = literalness_summary(teacher_lit, sample_lit)
    if s["teacher"] is None:
        tp = (f"Teacher log p of the privileged text: {NOT_MEASURED} (no teacher_literalness.json: the run was made "
              "before the measurement existed).")
    else:
        t = s["teacher"]
        tp = (f"Teacher log p per token of the privileged text: {_f(t['with_context'])} with context vs "
              f"{_f(t['without_context'])} without (mean over {t['candidates']} candidates).")
    if s["samples"] is None:
        sp = (f"Similarity of the target samples to the privileged text: {NOT_MEASURED} (no "
              "sample_literalness.json: the run was made before the measurement existed).")
    else:
        p = s["samples"]
        if p["members"] is None and p["non_members"] is None:
            sp = (f"Similarity of the target samples to the privileged text: {_f(p['all'])} (no membership "
                  "labels).")
        else:
            sp = (f"Similarity of the target samples to the privileged text: members {_f(p['members'])} vs "
                  f"non-members {_f(p['non_members'])}, AUROC {_f(p['auroc'])} (pooled over {p['n_targets']} "
                  "real targets).")
    return tp, sp


def literalness_tables(run_dir: str | Path) -> dict:
    """For the notebooks: `teacher` (teacher_info), `summary` (literalness_summary), `lines` (what the CLI prints:
    teacher_lines), and the `teacher_table` / `sample_table` DataFrames (None when the run lacks the file)."""
    from leakaudit.literalness import load

    teacher_lit, sample_lit = load(run_dir)
    info = teacher_info(run_dir, teacher_lit=teacher_lit)
    return {"teacher": info, "summary": literalness_summary(teacher_lit, sample_lit),
            "lines": _lines(info, teacher_lit, sample_lit),
            "teacher_table": teacher_table(teacher_lit) if teacher_lit is not None else None,
            "sample_table": sample_table(sample_lit) if sample_lit is not None else None}


def teacher_section(info: dict, teacher_lit: dict | None, sample_lit: dict | None) -> str:
    """HTML: which teacher, and how literal it and the targets' samples are (or "not measured in this run")."""
    tp, sp = literalness_phrases(teacher_lit, sample_lit)
    parts = [f"<p>{H.esc(teacher_phrase(info))} Students distilled from: {H.esc(info['model'])}.</p>"]
    if teacher_lit is None and sample_lit is None:
        parts.append(f'<p class="note">Literalness: {NOT_MEASURED} (no teacher_literalness.json or '
                     'sample_literalness.json: the run was made before these measurements existed).</p>')
        return H.section("Teacher and literalness", *parts, anchor="teacher")
    parts.append(f"<p>{H.esc(tp)}</p>")
    if teacher_lit is not None:
        parts.append(H.table(teacher_table(teacher_lit)))
        parts.append('<p class="note">Mean per-token log p (nats) of each candidate\'s privileged text + EOS under '
                     'the teacher, after the teacher prompt (with the privileged context) and after the student '
                     'prompt (without); "restated": the same for the restatement, over the candidates a rule '
                     'restates. A copying teacher puts the privileged text near 0 with its context; a prepared '
                     'teacher never trained on a candidate.</p>')
    parts.append(f"<p>{H.esc(sp)}</p>")
    if sample_lit is not None:
        parts.append(H.table(sample_table(sample_lit)))
        parts.append('<p class="note">difflib ratio between each fresh sample of the target and the start of the '
                     'privileged text (cut to the sample\'s length), mean over a record\'s samples; AUROC: that '
                     'similarity as a membership score (ties half). Null targets are listed, not pooled.</p>')
    return H.section("Teacher and literalness", *parts, anchor="teacher")


def _lines(info: dict, teacher_lit: dict | None, sample_lit: dict | None) -> list[str]:
    lines = [teacher_phrase(info)]
    if teacher_lit is None and sample_lit is None:
        return lines + [f"Literalness: {NOT_MEASURED}."]
    return lines + list(literalness_phrases(teacher_lit, sample_lit))


def teacher_lines(run_dir: str | Path) -> list[str]:
    """The text printed under the headline: the teacher sentence and the two literalness sentences (one "not
    measured in this run" line when the run has neither file)."""
    from leakaudit.literalness import load

    teacher_lit, sample_lit = load(run_dir)
    return _lines(teacher_info(run_dir, teacher_lit=teacher_lit), teacher_lit, sample_lit)

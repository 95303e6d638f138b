"""`leakaudit audit` is a study with the target given: it resumes, and it never reuses work done for another
target, other candidates or a target changed in place (issue 12, item 1); its records are checked before anything
is written (items 3, 5, 6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from leakaudit.cli import main

FAST = ["--train-references", "2", "--set", "training.epochs=1", "--set", "training.max_new_tokens=4",
        "--set", "training.batch_size=3", "--set", "signals.sampling.n_per_record=2",
        "--set", "signals.sampling.max_new_tokens=4", "--set", "metrics.n_boot=20"]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def audit_inputs(tmp_path_factory, tiny_model_dir):
    from leakaudit.data.sources import load_source

    tmp = tmp_path_factory.mktemp("audit")
    recs = load_source("champ", limit=12, seed=1)
    cands, pop = recs[:6], recs[6:]
    _write_jsonl(tmp / "cands.jsonl", [{**r.to_dict(), "meta": {"is_member": i % 2 == 0}} for i, r in enumerate(cands)])
    _write_jsonl(tmp / "pop.jsonl", [r.to_dict() for r in pop])
    target = tmp / "target"
    shutil.copytree(tiny_model_dir, target)
    return tmp, target


def _audit(capsys, tmp, target, out, *extra, base_model):
    return _run(capsys, "audit", "--target", target, "--candidates", tmp / "cands.jsonl", "--population",
                tmp / "pop.jsonl", "--base-model", base_model, "--out", out, *FAST, *extra)


@pytest.fixture(scope="module")
def finished_audit(audit_inputs, tiny_model_dir):
    tmp, target = audit_inputs
    out = tmp / "run"
    code = main([str(a) for a in ["audit", "--target", target, "--candidates", tmp / "cands.jsonl", "--population",
                                  tmp / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST]])
    assert code == 0
    return out


def test_rerun_resumes_and_changes_nothing(finished_audit, audit_inputs, tiny_model_dir, capsys):
    tmp, target = audit_inputs
    before = _snapshot(finished_audit)
    code, _, err = _audit(capsys, tmp, target, finished_audit, base_model=tiny_model_dir)
    assert code == 0, err
    for stage in ("records", "plan", "students", "signals", "attacks", "report"):
        assert f"[{stage}] skipped" in err
    after = _snapshot(finished_audit)
    assert {k: v for k, v in after.items() if k not in ("env.json",)} == \
        {k: v for k, v in before.items() if k not in ("env.json",)}


def test_another_target_into_the_same_directory_is_refused(finished_audit, audit_inputs, tiny_model_dir_b,
                                                           tiny_model_dir, capsys):
    """Before the fix, the second audit silently reused the first one's references and signals."""
    tmp, _ = audit_inputs
    before = _snapshot(finished_audit)
    code, _, err = _audit(capsys, tmp, tiny_model_dir_b, finished_audit, base_model=tiny_model_dir)
    assert code == 2 and "different config" in err and err.count("\n") == 1
    assert _snapshot(finished_audit) == before


def test_candidates_changed_in_place_are_refused(finished_audit, audit_inputs, tiny_model_dir, capsys, tmp_path):
    tmp, target = audit_inputs
    out = tmp_path / finished_audit.name  # the run name is part of the config
    shutil.copytree(finished_audit, out)
    before = _snapshot(out)
    cands = tmp / "cands.jsonl"
    original = cands.read_text()
    rows = [json.loads(line) for line in original.splitlines()]
    rows[0]["meta"]["is_member"] = not rows[0]["meta"]["is_member"]  # other labels, same path
    try:
        _write_jsonl(cands, rows)
        code, _, err = _audit(capsys, tmp, target, out, base_model=tiny_model_dir)
    finally:
        cands.write_text(original)
    assert code == 2 and "stage 'records'" in err
    assert _snapshot(out) == before


def test_target_retrained_in_place_is_refused(audit_inputs, tiny_model_dir, capsys, tmp_path):
    """Same target path, other weights: signals made by the old model must not be reused."""
    tmp, target = audit_inputs
    target2 = tmp_path / "target"
    shutil.copytree(target, target2)
    out = tmp_path / "run"
    code, _, err = _audit(capsys, tmp, target2, out, base_model=tiny_model_dir)
    assert code == 0, err
    before = _snapshot(out)
    weights = next(target2.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    code, _, err = _audit(capsys, tmp, target2, out, base_model=tiny_model_dir)
    assert code == 2 and "other inputs" in err and "--force" in err
    assert _snapshot(out) == before


def test_audit_outputs_and_recipe(finished_audit):
    import pandas as pd

    from leakaudit.membership import MembershipPlan

    table = pd.read_csv(finished_audit / "candidates.csv")
    assert len(table) == 6 and {"leaky", "loss", "lira_offline", "is_member"} <= set(table.columns)
    assert not {"lira_online", "rmia"} & set(table.columns)  # online forms need IN references: none in an audit
    audit = json.loads((finished_audit / "audit.json").read_text())
    assert audit["teacher"] == "self" and audit["references_trained_here"] and audit["labels"]
    plan = MembershipPlan.load(finished_audit)
    trained = set().union(*(plan.members(m) for m in plan.models_of("math", "reference")))
    assert len(set(plan.population["math"]) - trained) >= len(plan.population["math"]) // 4  # RMIA's population
    assert (finished_audit / "stages" / "report.json").is_file() and (finished_audit / "report.html").is_file()


@pytest.mark.parametrize("case", ["mixed_domain", "over_budget", "candidate_in_population"])
def test_bad_audit_records_exit_2_naming_line_and_write_nothing(case, audit_inputs, tiny_model_dir, capsys,
                                                                tmp_path):
    tmp, target = audit_inputs
    cands = [json.loads(line) for line in (tmp / "cands.jsonl").read_text().splitlines()]
    pop = [json.loads(line) for line in (tmp / "pop.jsonl").read_text().splitlines()]
    if case == "mixed_domain":
        cands[3] = {**cands[3], "domain": "medical", "record_id": ""}
        bad, line = "cands.jsonl", 4
    elif case == "over_budget":
        cands[2] = {**cands[2], "privileged": "word " * 500, "record_id": ""}
        bad, line = "cands.jsonl", 3
    else:
        pop[1] = cands[0]
        bad, line = "pop.jsonl", 2
    _write_jsonl(tmp_path / "cands.jsonl", cands)
    _write_jsonl(tmp_path / "pop.jsonl", pop)
    out = tmp_path / "run"
    code, _, err = _run(capsys, "audit", "--target", target, "--candidates", tmp_path / "cands.jsonl",
                        "--population", tmp_path / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST)
    assert code == 2 and f"{bad}, line {line}" in err and "record " in err, err
    assert not out.exists()

"""The command line: bad input exits 2 naming the file, line/record and field, and writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from leakaudit.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


GOOD = {"domain": "math", "prompt": "What is 2+2?", "privileged": "2+2=4", "answer": "4"}


def test_records_prints_jsonl_for_every_offline_source(capsys):
    for source, domain in (("champ", "math"), ("humaneval", "code"), ("medical", "medical")):
        code, out, _ = _run(capsys, "records", "--source", source, "--limit", "3")
        assert code == 0
        rows = [json.loads(line) for line in out.splitlines()]
        assert len(rows) == 3 and {r["domain"] for r in rows} == {domain}
        assert all(r["prompt"] and r["privileged"] and r["record_id"] for r in rows)


def test_records_count_and_list(capsys):
    code, out, _ = _run(capsys, "records", "--source", "champ", "--count")
    assert code == 0 and out.strip() == "math\t270"
    code, out, _ = _run(capsys, "records", "--list")
    assert code == 0 and "humaneval" in out and "gsm8k" in out


@pytest.mark.parametrize("rows,needle", [
    ([GOOD, {**GOOD, "prompt": ""}], "line 2, field 'prompt': is empty"),
    ([{k: v for k, v in GOOD.items() if k != "privileged"}], "line 1, field 'privileged'"),
    ([GOOD, GOOD], "duplicate record_id"),
])
def test_bad_records_file_exits_2_naming_line_and_field(tmp_path, capsys, rows, needle):
    src = tmp_path / "cands.jsonl"
    _write_jsonl(src, rows)
    out = tmp_path / "out.jsonl"
    code, _, err = _run(capsys, "records", "--source", "file", "-o", f"path={src}", "--out", str(out))
    assert code == 2
    assert str(src) in err and needle in err
    assert not out.exists()  # nothing half-written


def test_non_utf8_exits_2(tmp_path, capsys):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"domain": "m\xff"}\n')
    code, _, err = _run(capsys, "plan", "--records", str(src), "--out", str(tmp_path / "plan"))
    assert code == 2 and "line 2" in err and "UTF-8" in err
    assert not (tmp_path / "plan").exists()


def test_plan_writes_a_reproducible_plan(tmp_path, tiny_model_dir, capsys):
    src = tmp_path / "recs.jsonl"
    _write_jsonl(src, [{**GOOD, "prompt": f"What is {i}+2?", "privileged": f"{i}+2={i + 2}"} for i in range(12)])
    for name in ("a", "b"):
        code, out, err = _run(capsys, "plan", "--records", str(src), "--out", str(tmp_path / name), "--preset", "tiny",
                              "--set", f"base_model={tiny_model_dir}", "--n-candidates", "8", "--n-population", "4",
                              "--seed", "3")
        assert code == 0 and "plan (keep_matrix, seed 3): 5 models, 8 candidates" in out, err
    assert (tmp_path / "a/membership.parquet").read_bytes() == (tmp_path / "b/membership.parquet").read_bytes()


def test_plan_builds_run_studys_plan_and_train_starts_from_it(tmp_path, tiny_model_dir, capsys):
    """`leakaudit plan` is run-study's records and plan stages (the same builder: the same plan.json as run-study's
    on the same config), and the run directory it writes is where `leakaudit train` starts."""
    from leakaudit.config import load_config
    from leakaudit.data.sources import load_source
    from leakaudit.membership import MembershipPlan
    from leakaudit.study import Study

    src = tmp_path / "champ.jsonl"
    _write_jsonl(src, [r.to_dict() for r in load_source("champ", limit=12, seed=1)])
    out = tmp_path / "runs" / "x"
    code, stdout, err = _run(capsys, "plan", "--records", str(src), "--out", str(out), "--preset", "tiny",
                             "--set", f"base_model={tiny_model_dir}", "--set", "training.max_new_tokens=4")
    assert code == 0, err
    assert "plan (keep_matrix, seed 0): 5 models, 4 candidates" in stdout
    assert {"study.yaml", "records.jsonl", "membership.parquet", "plan.json"} <= {p.name for p in out.iterdir()}
    # run-study's plan builder on the config plan wrote: the same plan
    cfg = load_config(out / "study.yaml")
    cfg.out_root, cfg.name = str(tmp_path / "again"), "x"
    again = Study(cfg, progress=False, log=lambda m: None).run_all(until="plan")
    assert MembershipPlan.load(again).equals(MembershipPlan.load(out))
    assert (again / "plan.json").read_text() == (out / "plan.json").read_text()
    # and `leakaudit train` trains a student of it
    code, _, err = _run(capsys, "train", "--plan", str(out), "--model-id", "math-s1")
    assert code == 0, err
    meta = json.loads((out / "models" / "math-s1" / "meta.json").read_text())
    assert (out / "models" / "math-s1" / "DONE").is_file()
    assert sorted(meta["record_ids"]) == sorted(MembershipPlan.load(out).members("math-s1"))


def test_plan_refuses_a_file_of_two_domains(tmp_path, capsys):
    src = tmp_path / "recs.jsonl"
    _write_jsonl(src, [GOOD, {**GOOD, "domain": "code"}])
    code, _, err = _run(capsys, "plan", "--records", str(src), "--out", str(tmp_path / "plan"))
    assert code == 2 and "['code', 'math']" in err and "one --records file per domain" in err
    assert not (tmp_path / "plan").exists()


def test_plan_refuses_fewer_than_four_students_as_run_study_does(tmp_path, capsys):
    # before: --n-students 2 wrote a plan in which no target had a matched reference (run-study refuses 2)
    src = tmp_path / "recs.jsonl"
    _write_jsonl(src, [{**GOOD, "prompt": f"What is {i}+2?", "privileged": f"{i}+2={i + 2}"} for i in range(16)])
    code, _, err = _run(capsys, "plan", "--records", str(src), "--out", str(tmp_path / "plan"), "--n-students", "2",
                        "--n-candidates", "8", "--n-population", "8")
    assert code == 2 and "n_students: must be even and >= 4" in err
    assert not (tmp_path / "plan").exists()


def test_a_missing_base_model_is_named_by_its_key(tmp_path, capsys):
    # before: "unknown model reference '...'" from the token-budget check, naming no key
    code, _, err = _run(capsys, "run-study", "--preset", "tiny", "--set", f"base_model={tmp_path / 'nope'}",
                        "--set", f"out_root={tmp_path / 'out'}")
    assert code == 2 and err.startswith("error: base_model (--base-model): unknown model reference"), err
    assert not (tmp_path / "out").exists()


def test_run_study_bad_override_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, "run-study", "--set", "plan.n_students=3", "--set", f"out_root={tmp_path}")
    assert code == 2 and "n_students" in err
    code, _, err = _run(capsys, "run-study", "--set", "plan.nope=1", "--set", f"out_root={tmp_path}")
    assert code == 2 and "plan.nope: unknown key" in err
    assert not any(tmp_path.iterdir())


def test_report_on_missing_run_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, "report", str(tmp_path))
    assert code == 2 and "scores.parquet" in err


def test_attacks_lists_every_registered_attack(capsys):
    from attacks import list_attacks

    code, out, _ = _run(capsys, "attacks")
    assert code == 0
    for spec in list_attacks():
        assert spec.name in out


def test_console_script_help_and_exit_code(tmp_path):
    res = subprocess.run([sys.executable, "-m", "leakaudit.cli", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "run-study" in res.stdout and "audit" in res.stdout
    res = subprocess.run([sys.executable, "-m", "leakaudit.cli", "report", str(tmp_path)], capture_output=True,
                         text=True)
    assert res.returncode == 2 and "error:" in res.stderr


def test_audit_end_to_end_on_tiny_model(tmp_path, tiny_model_dir, capsys):
    """Audit a tiny 'deployed' student: references trained on population only, candidates scored, labels used."""
    from leakaudit.data.sources import load_source

    recs = load_source("champ", limit=12, seed=1)
    cands, pop = recs[:6], recs[6:]
    cand_rows = [{**r.to_dict(), "meta": {**r.meta, "is_member": i % 2 == 0}} for i, r in enumerate(cands)]
    _write_jsonl(tmp_path / "cands.jsonl", cand_rows)
    _write_jsonl(tmp_path / "pop.jsonl", [r.to_dict() for r in pop])
    out = tmp_path / "audit"
    code, stdout, err = _run(
        capsys, "audit", "--target", tiny_model_dir, "--candidates", str(tmp_path / "cands.jsonl"), "--population",
        str(tmp_path / "pop.jsonl"), "--train-references", "2", "--base-model", tiny_model_dir, "--out", str(out),
        "--set", "training.epochs=1", "--set", "training.max_new_tokens=4", "--set", "training.batch_size=3",
        "--set", "signals.sampling.n_per_record=2", "--set", "signals.sampling.max_new_tokens=4",
        "--set", "metrics.n_boot=20")
    assert code == 0, err
    import pandas as pd

    table = pd.read_csv(out / "candidates.csv")
    assert len(table) == 6 and "leaky" in table.columns and "loss" in table.columns
    assert "lira_online" not in table.columns  # a disjoint audit has no IN references
    assert (out / "models/math-ref0/DONE").is_file() and (out / "models/math-ref1/DONE").is_file()
    # references never trained on a candidate
    from leakaudit.membership import MembershipPlan

    plan = MembershipPlan.load(out)
    cand_ids = {r.record_id for r in cands}
    for m in plan.models_of("math", "reference"):
        assert not cand_ids & set(plan.members(m))
    assert set(plan.members("target")) == {r.record_id for i, r in enumerate(cands) if i % 2 == 0}
    assert (out / "report.html").is_file()


def test_run_study_out_names_the_run_directory_as_audit_out_does(monkeypatch, tmp_path):
    """`run-study --out DIR` runs in DIR (its parent as out_root, its name as the run's name); a shard in DIR-<domain>."""
    from leakaudit.study import Study

    roots = []
    monkeypatch.setattr(Study, "run_all", lambda self: roots.append(self.run.root) or self.run.root)
    assert main(["run-study", "--preset", "tiny", "--out", str(tmp_path / "studies" / "mine")]) == 0
    assert main(["run-study", "--preset", "cpu-full", "--domain", "code", "--out", str(tmp_path / "full")]) == 0
    assert main(["run-study", "--preset", "tiny", "--set", f"out_root={tmp_path}"]) == 0
    assert roots == [tmp_path / "studies" / "mine", tmp_path / "full-code", tmp_path / "tiny"]

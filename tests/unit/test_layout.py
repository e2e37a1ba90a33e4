"""The package layout's rules, read from the source (imports under TYPE_CHECKING included).

- ``broker/`` has no import cycle: ``broker/broker.py`` is the one module that wires the
  process together, and the others type against the narrow protocols of
  ``broker/services.py`` (handlers see a ``RequestContext``, never the network layer).
- ``security/`` depends on nothing of ``broker/`` or ``coordinator/``: they use it.
- ``metadata/`` (the cluster metadata and its controller) depends on nothing of ``broker/``,
  ``coordinator/`` or ``tools/``, and has no import cycle: the brokers and tools use it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tools.verify.checker import _sccs

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "storage", "metadata", "coordinator", "security", "broker", "tools", "pipeline")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (``from x import y`` counts as y if y is a module)."""
    out: set[str] = set()
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                up = base[:len(base) - (node.level - 1)]
                target = ".".join(up + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles: strongly connected components of more than one module (the checker's
    Tarjan search)."""
    return [sorted(c) for c in _sccs([edges])]


def test_the_cycle_search_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_broker_modules_import_no_cycle():
    edges = graph()
    assert "broker.broker" in edges and edges["broker.server"], "the import graph was not read"
    in_broker = [c for c in cycles(edges) if any(m.startswith("broker.") for m in c)]
    assert in_broker == []


def test_handlers_and_services_do_not_import_the_broker_or_the_network_layer():
    edges = graph()
    users = {m: deps for m, deps in edges.items()
             if m.startswith("broker.handlers.") or m in ("broker.services", "broker.coordinator_services",
                                                          "broker.txn_services", "broker.share_remote")}
    assert len(users) > 50
    bad = {m: sorted(deps & {"broker.broker", "broker.server"}) for m, deps in users.items()
           if deps & {"broker.broker", "broker.server"}}
    assert bad == {}


def test_security_depends_on_neither_broker_nor_coordinator():
    edges = graph()
    security = {m: deps for m, deps in edges.items() if m == "security" or m.startswith("security.")}
    assert {"security.acls", "security.authorizer", "security.scram"} <= set(security)
    bad = {m: sorted(d for d in deps if d.split(".")[0] in ("broker", "coordinator"))
           for m, deps in security.items()}
    assert {m: d for m, d in bad.items() if d} == {}


def test_metadata_depends_on_neither_broker_nor_coordinator_nor_tools_and_has_no_cycle():
    edges = graph()
    plane = {m: deps for m, deps in edges.items() if m == "metadata" or m.startswith("metadata.")}
    assert {"metadata.image", "metadata.etcd.client", "metadata.controller.replication"} <= set(plane)
    bad = {m: sorted(d for d in deps if d.split(".")[0] in ("broker", "coordinator", "tools"))
           for m, deps in plane.items()}
    assert {m: d for m, d in bad.items() if d} == {}
    assert [c for c in cycles(edges) if any(m.startswith("metadata.") for m in c)] == []

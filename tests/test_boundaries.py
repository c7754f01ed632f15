"""Package boundaries are tested, not described: the imports of the four packages, read from
their source, must be exactly the edges that docs/architecture.md allows.

Every ``.py`` file of ``edge``, ``export``, ``kernels`` and ``firmware_bridge`` is parsed (not
imported) and each import of another package is tagged by where it runs: ``module`` (at
import time: the module or a class body, ``try``/``if`` blocks included), ``typing`` (under
``if TYPE_CHECKING:``), ``function`` (inside a function), ``dynamic`` (``importlib.import_module``
or ``__import__`` with a literal name). The entries of the plug-in table (``edge/plugins.py``)
are ``plugin`` edges from the package that reads the group to the package of the target.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("edge", "export", "kernels", "firmware_bridge")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
IMPORT_KINDS = ("module", "typing", "function", "dynamic")


@dataclass(frozen=True)
class Import:
    """One import statement (or literal dynamic import) found in the source."""

    module: str  # the importing module, dotted
    target: str  # the imported module, dotted (``from a.b import c``: ``a.b.c`` if a module)
    kind: str  # one of IMPORT_KINDS
    where: str  # path:line, for messages


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _literal_dynamic_import(node: ast.Call) -> str | None:
    """The module name of ``importlib.import_module("x")`` / ``__import__("x")``, else None."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _imports(modules: dict[str, Path]) -> list[Import]:
    found: list[Import] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = path.relative_to(ROOT)

        def resolve(node: ast.ImportFrom, name: str = name, is_package: bool = is_package
                    ) -> str:
            if not node.level:
                return node.module or ""
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            return ".".join(base + ([node.module] if node.module else []))

        def visit(node: ast.AST, kind: str, rel: Path = rel, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                child_kind = kind
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    child_kind = "function"
                elif isinstance(child, ast.If) and kind == "module" and \
                        _is_type_checking(child.test):
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "module")
                    continue
                where = f"{rel}:{getattr(child, 'lineno', '?')}"
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        found.append(Import(name, alias.name, child_kind, where))
                elif isinstance(child, ast.ImportFrom):
                    base = resolve(child)
                    for alias in child.names:
                        full = f"{base}.{alias.name}"
                        found.append(Import(name, full if full in modules else base,
                                            child_kind, where))
                elif isinstance(child, ast.Call):
                    target = _literal_dynamic_import(child)
                    if target:
                        found.append(Import(name, target, "dynamic", where))
                visit(child, child_kind)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module")
    return found


def _plugin_table() -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """``(PLUGINS, GROUP_READERS)`` from edge/plugins.py, read as literals; empty without it."""
    path = ROOT / "edge" / "plugins.py"
    tables: dict[str, object] = {}
    if path.is_file():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                tables[node.target.id] = ast.literal_eval(node.value)
    plugins = tables.get("PLUGINS", {})
    readers = tables.get("GROUP_READERS", {})
    assert isinstance(plugins, dict) and isinstance(readers, dict)
    return plugins, readers


def _package(module: str) -> str:
    return module.split(".")[0]


def _package_edges() -> dict[tuple[str, str], dict[str, list[str]]]:
    """``(from, to) -> kind -> [where, ...]`` over the four packages."""
    modules = _modules()
    edges: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for imp in _imports(modules):
        src, dst = _package(imp.module), _package(imp.target)
        if dst in PACKAGES and dst != src:
            edges[(src, dst)][imp.kind].append(f"{imp.where} ({imp.target})")
    plugins, readers = _plugin_table()
    for group, entries in plugins.items():
        src = _package(readers.get(group, "edge"))
        for entry, target in entries.items():
            dst = _package(target)
            if dst != src:
                edges[(src, dst)]["plugin"].append(f"{group} {entry} = {target}")
    return edges


def _table(marker: str) -> list[list[str]]:
    """The rows of the Markdown table that follows ``<!-- marker -->`` in architecture.md,
    cells stripped of backquotes (header and rule rows dropped)."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- {marker} -->") + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("`", "") for c in line.strip().strip("|").split("|")])
    return rows[2:]


def _allowed_edges() -> dict[tuple[str, str], set[str]]:
    allowed: dict[tuple[str, str], set[str]] = {}
    for src, dst, kinds, _ in _table("allow-list: package imports"):
        assert (src, dst) not in allowed, f"architecture.md lists {src} -> {dst} twice"
        allowed[(src, dst)] = {k.strip() for k in kinds.split(",")}
    return allowed


def _layers() -> list[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    m = re.search(r"^Layers, lowest first: (.+)\.$", text, re.M)
    assert m, "architecture.md: expected a line 'Layers, lowest first: `a` < `b` ...'"
    return [p.strip(" `") for p in m.group(1).split("<")]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(out)


def test_cross_package_imports_are_exactly_the_allow_list() -> None:
    found = _package_edges()
    allowed = _allowed_edges()
    problems = []
    for (src, dst), kinds in sorted(found.items()):
        for kind, where in sorted(kinds.items()):
            if kind not in allowed.get((src, dst), set()):
                problems.append(f"{src} -> {dst} ({kind}) is not in the allow-list of "
                                f"docs/architecture.md: {'; '.join(where[:4])}")
    for (src, dst), allowed_kinds in sorted(allowed.items()):
        for kind in sorted(allowed_kinds - set(found.get((src, dst), {}))):
            problems.append(f"{src} -> {dst} ({kind}) is in the allow-list of "
                            f"docs/architecture.md but the code has no such edge: remove the row")
    assert not problems, "\n".join(problems)


def test_imports_go_down_the_layers_and_only_plugins_point_up() -> None:
    layers = _layers()
    assert sorted(layers) == sorted(PACKAGES), layers
    rank = {p: i for i, p in enumerate(layers)}
    for source, edges in (("the code", {k: set(v) for k, v in _package_edges().items()}),
                          ("the allow-list", _allowed_edges())):
        for (src, dst), kinds in sorted(edges.items()):
            upward = sorted(set(kinds) & set(IMPORT_KINDS)) if rank[src] < rank[dst] else []
            assert not upward, (f"{source}: {src} imports {dst} ({', '.join(upward)}), against "
                                f"the layers {' < '.join(layers)}; reach up through a plug-in "
                                f"group (edge/plugins.py) instead")
            assert "plugin" not in kinds or rank[src] < rank[dst], \
                f"{source}: {src} -> {dst} is a plug-in edge down the layers: import it"


def test_packages_import_each_other_in_no_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for (src, dst), kinds in _package_edges().items():
        if set(kinds) & set(IMPORT_KINDS):
            graph[src].add(dst)
    assert _cycles(graph) == []


def test_module_import_cycles_are_only_the_documented_ones() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for imp in _imports(modules):
        if imp.target in modules and imp.target != imp.module and imp.kind != "typing":
            graph[imp.module].add(imp.target)
            kinds[(imp.module, imp.target)].add(imp.kind)
    found = {tuple(c) for c in _cycles(graph)}
    documented = {tuple(sorted(m.strip() for m in mods.split(",")))
                  for mods, _, _ in _table("allow-list: module cycles")}
    assert found == documented, (f"module import cycles: found {sorted(found)}, "
                                 f"docs/architecture.md lists {sorted(documented)}")
    at_import: dict[str, set[str]] = defaultdict(set)
    for (a, b), k in kinds.items():
        if k & {"module", "dynamic"}:
            at_import[a].add(b)
    assert _cycles(at_import) == [], "modules that import each other at import time"


def test_plugin_groups_are_read_where_documented_and_name_real_targets() -> None:
    plugins, readers = _plugin_table()
    assert plugins, "edge/plugins.py: expected the PLUGINS table"
    modules = _modules()
    for group, entries in plugins.items():
        reader = readers.get(group)
        assert reader in modules, f"{group}: read by {reader!r}, expected a module of ours"
        assert f'"{group}"' in modules[reader].read_text(encoding="utf-8"), \
            f"{group}: {reader} does not name the group"
        for entry, target in entries.items():
            mod, _, attr = target.partition(":")
            assert mod in modules and attr, f"{group} {entry}: {target!r} names no module"
            tree = ast.parse(modules[mod].read_text(encoding="utf-8"))
            names = {n.name for n in tree.body
                     if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert attr in names, f"{group} {entry}: {mod} defines no {attr!r}"


def _module_map() -> list[str]:
    """The paths named in the first column of docs/architecture.md's module map."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text[text.index("| where | what |"):].split("\n\n", 1)[0]
    paths: list[str] = []
    for row in table.splitlines()[2:]:
        paths += re.findall(r"`([^`]+)`", row.split(" | ")[0])
    return paths


def test_module_map_matches_the_tree() -> None:
    """Every path the module map names exists, and every module of the four packages is
    named by the map, itself or through its folder (``edge/runtime/``)."""
    paths = _module_map()
    assert len(paths) > 20, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md's module map names paths not in the tree: {missing}"
    folders = tuple(p for p in paths if p.endswith("/"))
    files = {p for p in paths if p.endswith(".py")}
    unlisted = []
    for path in _modules().values():
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" and rel.count("/") == 1:
            continue  # the package itself
        if rel not in files and not rel.startswith(folders):
            unlisted.append(rel)
    assert not unlisted, f"modules that docs/architecture.md's module map does not name: {unlisted}"

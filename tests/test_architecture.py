"""The package's shape (issue 55): no import cycles among dp_dask's modules, no module over
MAX_LINES lines without a reason in its docstring, and no branch on a method's name where the
methods' classes should answer (the checks, the estimate, the CLI).

Imports are read with ``ast``, not run. The graph holds every import, at any level (issue 66):
at module level (inside ``if``/``try``/``with`` blocks too), inside a function, and under
``if TYPE_CHECKING:``. An import that runs only when a function is called, or only for a type
checker, still ties its module to the one it names: two modules that import each other are one
design, whatever the line an import stands on; the shared code moves where both may import it.
``from package import name`` depends on the submodule ``package.name`` where there is one, else
on the package's ``__init__``. CYCLES_ALLOWED names the cycles still being undone.

A module over MAX_LINES lines states why in its docstring, in a paragraph starting "Size:"
(e.g. "Size: ... to be split in issue 55 (...)").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dp_dask"
MAX_LINES = 600
# Over MAX_LINES without a "Size:" paragraph, each with why; an entry no longer over is an error.
SIZE_ALLOWED: dict[str, str] = {}
# Import cycles still being undone, each with why; an entry no longer a cycle is an error.
CYCLES_ALLOWED: dict[tuple[str, ...], str] = {}


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under ``root`` by its dotted name (a package by its own)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of a module, at any level: module level, in a function or a class, under
    ``if TYPE_CHECKING:``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports, at any level."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = []
    for node in imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
            continue
        base = node.module or ""
        if node.level:  # relative: from the package, up level - 1
            parts = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                    for a in node.names]
    found = set()
    for target in targets:
        while target and target not in known:  # a name inside a module: that module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_item1_the_import_graph_reads_imports_at_any_level(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from pkg.a import thing\n")
    (root / "a.py").write_text("import os\nfrom . import b\nthing = 1\n")
    (root / "b.py").write_text("try:\n    from .sub import c\nexcept ImportError:\n    pass\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\n"
                                       "if TYPE_CHECKING:\n    from pkg import b\n"
                                       "def later():\n    import pkg.a\n")
    assert import_graph(root) == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.sub.c"},
                                  "pkg.sub": set(), "pkg.sub.c": {"pkg.a", "pkg.b"}}
    # each import that closes a cycle is one a function makes, or one for types only
    assert cycles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_item1_no_import_cycles_at_any_level():
    graph = import_graph()
    assert "dp_dask.release" in graph["dp_dask.synthesizer"]  # the reader sees the package
    found = {tuple(cycle): cycle for cycle in cycles(graph)}
    new = [cycle for key, cycle in found.items() if key not in CYCLES_ALLOWED]
    assert not new, ("import cycles among dp_dask's modules (imports at any level, in functions "
                     "and under TYPE_CHECKING too; move the shared code where both may import "
                     "it, or pass what one needs of the other): "
                     + "; ".join("{" + ", ".join(c) + "}" for c in new))
    stale = [", ".join(key) for key in CYCLES_ALLOWED if key not in found]
    assert not stale, f"no longer a cycle: drop from CYCLES_ALLOWED: {stale}"


def test_long_modules_say_why():
    unexplained, stale = [], []
    for name, path in modules().items():
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        says_why = any(line.startswith("Size:") for line in docstring.splitlines())
        if name in SIZE_ALLOWED:
            if lines <= MAX_LINES:
                stale.append(f"{name} ({lines} lines)")
        elif lines > MAX_LINES and not says_why:
            unexplained.append(f"{name} ({lines} lines)")
    assert not unexplained, (f"modules over {MAX_LINES} lines whose docstring has no 'Size:' "
                             f"paragraph saying why: {', '.join(unexplained)}")
    assert not stale, f"no longer over {MAX_LINES} lines: drop from SIZE_ALLOWED: {stale}"


# Where methods are asked, never named: each declares its cost limits and estimate on its class.
NAMES_NO_METHOD = ["checks.py", "estimate.py", "cli"]


def method_name_comparisons(path: Path, names: set[str]) -> list[str]:
    """``file:line: source`` of each comparison in ``path`` with a string constant in ``names``
    (alone, or in a tuple, list or set: ``method in ("copula", ...)``)."""
    text = path.read_text()

    def named(side: ast.expr) -> bool:
        if isinstance(side, ast.Tuple | ast.List | ast.Set):
            return any(named(element) for element in side.elts)
        return isinstance(side, ast.Constant) and side.value in names

    return [f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.get_source_segment(text, node)}"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Compare) and any(map(named, (node.left, *node.comparators)))]


def test_checks_estimate_and_cli_never_compare_with_a_method_name():
    from dp_dask.synthesizer import Synthesizer

    files = [path for entry in NAMES_NO_METHOD for path in
             (sorted((PACKAGE / entry).rglob("*.py")) if (PACKAGE / entry).is_dir()
              else [PACKAGE / entry])]
    names = set(Synthesizer.methods)
    found = [hit for path in files for hit in method_name_comparisons(path, names)]
    assert not found, ("a method's name compared where its class should answer (declare it on "
                       "the Synthesizer subclass): " + "; ".join(found))


def modules_importing(root: Path, package: str) -> list[str]:
    """``file:line`` of each import of ``package`` (or of a module in it) under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in imports(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if not node.level else [])
            if any(name == package or name.startswith(f"{package}.") for name in names):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_item1_the_product_and_the_tests_never_import_benchmarks():
    """The tests own their machinery (the S3 server is tests/s3_server.py, which the benchmarks
    load); benchmarks/ measures the product and may be left out of a checkout that tests it."""
    tests = Path(__file__).resolve().parent
    found = modules_importing(PACKAGE, "benchmarks") + modules_importing(tests, "benchmarks")
    assert not found, f"imports of benchmarks/ from the product or the tests: {found}"

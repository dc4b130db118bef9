"""docs/architecture.md and docs/method.md name what the package holds: a module added without a
line in the docs fails here, as the module maps once fell behind (issue 55)."""

from __future__ import annotations

import re
from pathlib import Path

from dp_dask.synthesizer import Synthesizer

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dp_dask"
DOCS = ROOT / "docs"


def section(path: Path, title: str) -> str:
    """The text of ``path``'s section ``## title``, up to the next ``## ``."""
    text = path.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def named(text: str) -> set[str]:
    """Names in backticks, a package's trailing ``/`` dropped."""
    return {name.rstrip("/") for name in re.findall(r"`([^`\s]+)`", text)}


def test_architecture_table_names_every_top_level_module_and_package():
    table = named(section(DOCS / "architecture.md", "Modules"))
    top = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert top - table == set()


def test_architecture_table_names_every_method_module():
    table = named(section(DOCS / "architecture.md", "Modules"))
    methods = {p.stem for p in (PACKAGE / "methods").glob("*.py") if p.stem != "__init__"}
    methods |= {p.parent.name for p in (PACKAGE / "methods").glob("*/__init__.py")}
    assert methods - table == set()


def test_method_page_names_every_release_method():
    intro = (DOCS / "method.md").read_text().split("\n## ", 1)[0]
    assert set(Synthesizer.methods) - named(intro) == set()
    assert "architecture.md" in intro


def drawn_graph() -> dict[str, set[str]]:
    """docs/architecture.md's import graph: each row's module or package and those it imports."""
    rows = re.findall(r"^\| `([\w/]+)` \| (`.*`) \|$", section(DOCS / "architecture.md",
                                                               "Import graph"), re.MULTILINE)
    return {name.rstrip("/"): {n.rstrip("/") for n in re.findall(r"`([\w/]+)`", imported)}
            for name, imported in rows}


def test_item6_the_architecture_page_draws_the_import_graph_as_it_is():
    from test_architecture import import_graph

    def unit(module: str) -> str:  # a top-level module or package of dp_dask
        return module.split(".")[1] if "." in module else "dp_dask"

    code: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        for target in targets:
            if unit(module) != unit(target):
                code.setdefault(unit(module), set()).add(unit(target))
    assert drawn_graph() == code

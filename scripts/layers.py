#!/usr/bin/env python3
"""The import rules of docs/architecture.md, checked: no import cycle in ``logmetrics/`` or
``parsers/``, and no module importing one of a stage above its own.

    python scripts/layers.py            # exit 1 and one line per problem if a rule is broken
    python scripts/layers.py --graph    # also print every import, module by module

The stages and their order come from the table between ``<!-- layers:begin -->`` and
``<!-- layers:end -->`` in docs/architecture.md, bottom stage first: a module may import its own
stage and the stages listed before it. Every import counts, those inside functions and under
``TYPE_CHECKING`` too: a dependency the type checker follows is a dependency.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The import name of each source folder (``parsers/`` is installed as ``logmetrics_parsers``).
PACKAGES = {"logmetrics": "logmetrics", "parsers": "logmetrics_parsers"}
_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
_PATH = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Stage:
    """One row of the table: its place from the bottom and the files or folders it holds."""

    level: int
    paths: tuple[str, ...]


def stages(doc: str) -> list[Stage]:
    """The stages of the table in ``doc`` (the text of docs/architecture.md), bottom first."""
    try:
        body = doc.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    except IndexError:
        raise SystemExit("docs/architecture.md: no <!-- layers:begin --> ... <!-- layers:end --> table") from None
    out = []
    for line in body.splitlines():
        m = _ROW.match(line)
        if m:
            out.append(Stage(int(m.group(1)), tuple(_PATH.findall(m.group(2)))))
    if [s.level for s in out] != list(range(len(out))):
        raise SystemExit("docs/architecture.md: the stages must be numbered 0, 1, 2, ... from the bottom")
    return out


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the two packages: its dotted import name and its file."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports, anywhere in it."""
    names = set(known)

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
        out.update(r for r in map(resolve, targets) if r is not None and r != name)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the two packages it imports."""
    found = modules(root)
    return {name: imports(name, path, found) for name, path in found.items()}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def stage_of(module: str, table: list[Stage]) -> int | None:
    """The level of the stage that holds ``module`` (the most specific path that covers it), if any."""
    best: tuple[int, int] | None = None  # (length of the path matched, level)
    for stage in table:
        for path in stage.paths:
            folder, _, _ = path.partition("/")
            rest = path[len(folder) + 1 :]
            package = PACKAGES.get(folder)
            if package is None:
                continue
            dotted = ".".join([package, *Path(rest).with_suffix("").parts]) if rest else package
            dotted = dotted.removesuffix(".__init__")
            covers = module == dotted or (path.endswith("/") and module.startswith(dotted + "."))
            if covers and (best is None or len(dotted) > best[0]):
                best = (len(dotted), stage.level)
    return None if best is None else best[1]


def problems(edges: Mapping[str, set[str]], table: list[Stage]) -> list[str]:
    """Every broken rule, one line each: a cycle, a module in no stage, an import of a stage above."""
    out = [f"import cycle: {' -> '.join(group)} -> {group[0]}" for group in cycles(edges)]
    for module in sorted(edges):
        level = stage_of(module, table)
        if level is None:
            out.append(f"{module}: in no stage of docs/architecture.md")
            continue
        for target in sorted(edges[module]):
            other = stage_of(target, table)
            if other is not None and other > level:
                out.append(f"{module} (stage {level}) imports {target}, of stage {other} above it")
    return out


def main(argv: list[str]) -> int:
    table = stages((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    edges = graph()
    if "--graph" in argv:
        for module in sorted(edges):
            print(f"{module} -> {' '.join(sorted(edges[module])) or '-'}")
    found = problems(edges, table)
    for line in found:
        print(f"scripts/layers.py: {line}", file=sys.stderr)
    arrows = sum(len(v) for v in edges.values())
    print(f"scripts/layers.py: {len(edges)} modules, {arrows} imports, {len(table)} stages: "
          f"{'OK' if not found else f'{len(found)} problems'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

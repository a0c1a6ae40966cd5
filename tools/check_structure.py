#!/usr/bin/env python3
"""ragbench's structure rules, checked from the source text (no import is executed).

Usage: python tools/check_structure.py [PACKAGE_DIR] [--max-lines N]

The rules (docs/explanation/architecture.md says why each exists):

* **no import cycle** between the package's modules, counting imports written
  inside functions: a cycle moved into a function is still two modules that
  cannot be understood, tested or loaded one without the other. A package's
  ``__init__`` re-exporting its own modules is its public face, not a layer:
  an import from inside a package of that package itself is not an edge;
* **no underscore name taken from another module**: ``from x import _name``
  reaches into ``x``'s private parts. Allowed: a private module's names
  (``from ._kernels import _score``: a private module is shared by its package
  on purpose), and a package's own private submodules imported from inside it;
* **no private module declares** ``__all__``: a leading underscore already
  says "not public", and an export list there only widens the public surface
  readers must review;
* **no function longer than** ``--max-lines`` (80) lines, decorators excluded.

Generated code (folders named ``_pb``) is skipped. Prints one line per
finding, ``path:line rule: what``, then a summary; exit status 1 when
anything was found, 2 when the arguments are wrong.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

GENERATED = "_pb"


@dataclass
class Module:
    """One source file of the package: its dotted name and parsed tree."""

    name: str
    path: Path  # relative to the package folder's parent, as printed
    tree: ast.Module
    is_package: bool
    imports: set[str] = field(default_factory=set)

    @property
    def private(self) -> bool:
        return self.name.rsplit(".", 1)[-1].startswith("_")

    @property
    def package(self) -> str:
        """The package the module's relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.rule}: {self.what}"


def load(root: Path) -> dict[str, Module]:
    """Every module under ``root`` (a package folder), keyed by dotted name."""
    out: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if GENERATED in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out[".".join(parts)] = Module(".".join(parts), rel, tree, is_package)
    return out


def absolute(mod: Module, node: ast.ImportFrom) -> str:
    """The dotted module an ``import from`` names, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    base = mod.package.split(".")
    if node.level > 1:
        base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def inside(mod: str, package: str) -> bool:
    return mod.startswith(package + ".")


def scan_imports(mod: Module, modules: dict[str, Module]) -> Iterator[Finding]:
    """Record ``mod``'s edges to other modules; yield the underscore names it takes."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.name != mod.name:
                    mod.imports.add(alias.name)
                yield from private_path(mod, node.lineno, alias.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            source = absolute(mod, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in modules else source
                if target in modules and target != mod.name:
                    mod.imports.add(target)
                if submodule in modules:
                    yield from private_path(mod, node.lineno, submodule.split("."))
                elif (
                    is_private(alias.name)
                    and source != mod.name
                    and not is_private(source.rsplit(".", 1)[-1])
                ):
                    what = f"takes {alias.name} from {source}"
                    yield finding(mod, node.lineno, "private", what)


def private_path(mod: Module, line: int, parts: list[str]) -> Iterator[Finding]:
    """A private module reached from outside the package that holds it."""
    for i, part in enumerate(parts):
        owner = ".".join(parts[:i])
        if i and is_private(part) and mod.name != owner and not inside(mod.name, owner):
            yield finding(
                mod, line, "private", f"imports {'.'.join(parts[: i + 1])} from outside {owner}"
            )
            return


def finding(mod: Module, line: int, rule: str, what: str) -> Finding:
    return Finding(str(mod.path), line, rule, what)


def long_functions(mod: Module, max_lines: int) -> Iterator[Finding]:
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > max_lines:
                yield finding(
                    mod, node.lineno, "long", f"{node.name} is {lines} lines (limit {max_lines})"
                )


def private_exports(mod: Module) -> Iterator[Finding]:
    if not mod.private:
        return
    for node in mod.tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            yield finding(mod, node.lineno, "exports", "a private module declares __all__")


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (iterative Tarjan).

    Edges from a module into a package that contains it are left out: that
    is the package re-exporting its own parts.
    """
    edges = {
        name: sorted(t for t in mod.imports if not inside(name, t)) for name, mod in modules.items()
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in order:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                order[node] = low[node] = len(order)
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if nxt not in order:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], order[nxt])
                continue
            if work:  # hand the finished node's low link to its caller
                caller = work[-1][0]
                low[caller] = min(low[caller], low[node])
            if low[node] == order[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def check(root: Path, max_lines: int = 80) -> list[Finding]:
    """Every finding for the package folder ``root``."""
    modules = load(root)
    found: list[Finding] = []
    for mod in modules.values():
        found += scan_imports(mod, modules)
        found += long_functions(mod, max_lines)
        found += private_exports(mod)
    for group in cycles(modules):
        first = modules[group[0]]
        found.append(finding(first, 1, "cycle", " -> ".join(group)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="ragbench's structure rules (see the module docstring)"
    )
    ap.add_argument("package", nargs="?", default="ragbench", type=Path)
    ap.add_argument("--max-lines", type=int, default=80)
    args = ap.parse_args(argv)
    if not (args.package / "__init__.py").is_file():
        ap.error(f"{args.package} is not a package folder")
    found = check(args.package.resolve(), args.max_lines)
    for f in found:
        print(f)
    counts = {
        rule: sum(f.rule == rule for f in found) for rule in ("cycle", "private", "exports", "long")
    }
    print(
        f"{counts['cycle']} import cycles, {counts['private']} underscore names or modules taken "
        f"across packages, {counts['exports']} private modules with __all__, "
        f"{counts['long']} functions over {args.max_lines} lines"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

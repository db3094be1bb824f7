"""The house is one-way: each package builds only on those below it, and no modules import each other
in a circle. docs/architecture.md draws the same layers; a new import that breaks them fails here,
naming the file and the import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Lowest first. A package may import its own modules and any package before it, never one after it.
LAYERS = ("wordle", "rewards", "evaluation", "tinymodel", "runtime", "settings", "models", "training")
ENTRY_SCRIPTS = ("grpo_train.py", "sft_train.py", "evaluate.py")
# Benchmarks and research probes stand on the packages, like a user's script; nothing imports them.
CONSUMERS = ("benchmarks", "research")


def project_imports(path: Path) -> list[str]:
    """The project modules ``path`` imports (at any depth of the file), as dotted names."""
    tops = {*LAYERS, *CONSUMERS, *(s.removesuffix(".py") for s in ENTRY_SCRIPTS), "tests"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n.split(".")[0] in tops]
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_imports_only_itself_and_the_layers_below(path):
    own = LAYERS.index(path.relative_to(ROOT).parts[0])
    above = [n for n in project_imports(path) if n.split(".")[0] not in LAYERS[: own + 1]]
    assert not above, f"{path.relative_to(ROOT)} imports {above}, above its layer {LAYERS[own]}"


@pytest.mark.parametrize(
    "path",
    [*(ROOT / s for s in ENTRY_SCRIPTS), *sorted(p for c in CONSUMERS for p in (ROOT / c).rglob("*.py"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_scripts_stand_on_the_packages_and_nothing_stands_on_them(path):
    others = [n for n in project_imports(path) if n.split(".")[0] not in LAYERS]
    assert not others, f"{path.relative_to(ROOT)} imports {others}: an entry script, a benchmark or a test"


def test_no_modules_import_each_other_in_a_circle():
    modules = {module_name(p): p for p in package_files()}
    edges = {
        name: {m for m in (i if i in modules else i.rsplit(".", 1)[0] for i in project_imports(p)) if m in modules}
        for name, p in modules.items()
    }
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            pytest.fail("import circle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for nxt in sorted(edges[name] - {name}):
            visit(nxt, [*path, name])
        done.add(name)

    for name in sorted(modules):
        visit(name, [])

"""The package's layout holds: which part may import which, and no module or function grows past
the sizes a reader can take in (the next feature splits a file instead of growing it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# part -> the parts it may import (pruner_model.<part>); commands (the CLIs) may import any part
MAY_IMPORT = {
    "core": set(),
    "evaluation": {"core"},
    "inference": {"core"},
    "annotation": {"core"},
    "training": {"core", "evaluation"},
    "adaptation": {"core", "evaluation", "annotation", "training", "inference"},
    "export": {"core", "evaluation", "inference"},
    "serving": {"core", "evaluation", "inference"},
    "integrations": {"core", "inference"},
}
FOLDERS = {**{part: ROOT / part for part in MAY_IMPORT}, "commands": ROOT / "pruner_model" / "commands"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 10
LONG_MARK = "# over 60 lines:"  # the comment above a longer function, with its reason


def modules():
    for part, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            yield part, path


def imported_parts(path: Path) -> set[tuple[str, int]]:
    """``(name, line)`` of every ``pruner_model`` import in the module, in functions too: the part
    (``core``, ...), ``root`` for the package facade itself."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "pruner_model" else []
            if node.module == "pruner_model":
                out |= {("root" if a.name != "__version__" else "version", node.lineno) for a in node.names}
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "pruner_model" and len(parts) > 1:
                out.add((parts[1], node.lineno))
    return out


@pytest.mark.parametrize("part", sorted(MAY_IMPORT))
def test_each_part_imports_only_what_it_may(part):
    allowed = MAY_IMPORT[part] | {part, "version"}
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports pruner_model.{name}"
        for p, path in modules()
        if p == part
        for name, line in imported_parts(path)
        if name not in allowed and name not in ("cli",)
    ]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_serving_export_or_the_commands():
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports pruner_model.{name}"
        for part, path in modules()
        for name, line in imported_parts(path)
        if name in ("serving", "export", "commands", "cli") and name != part and part != "commands"
    ]
    assert not wrong, "\n".join(wrong)


def module_name(part: str, path: Path) -> str:
    """``pruner_model.<part>.<module>`` of a file (the commands live inside the root package)."""
    rel = path.relative_to(FOLDERS[part]).with_suffix("")
    names = [n for n in rel.parts if n != "__init__"]
    return ".".join(["pruner_model", "commands" if part == "commands" else part, *names])


def module_imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports, at its top level or inside functions (not those
    under ``if TYPE_CHECKING:``, which never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:  # "from pkg import module" names a module; else the module itself
                full = f"{node.module}.{a.name}"
                out.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out & known


def import_graph() -> dict[str, set[str]]:
    files = {module_name(part, path): path for part, path in modules()}
    return {name: module_imports(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports) as a path, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_module_imports_itself_back():
    """No import cycle between the package's modules, through imports inside functions too."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_command_imports_another_command():
    """Each command module parses its arguments and calls the parts; what two commands share is in
    ``commands/common.py``."""
    graph = import_graph()
    wrong = [
        f"{name} imports {other}"
        for name, imported in graph.items()
        if name.startswith("pruner_model.commands.")
        for other in imported
        if other.startswith("pruner_model.commands.") and other != "pruner_model.commands.common"
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_is_over_the_line_limit():
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for _, path in modules()
        if (n := path.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    ]
    assert not long, f"over {MAX_MODULE_LINES} lines (split the module):\n" + "\n".join(long)


def long_functions():
    for _, path in modules():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    yield path.relative_to(ROOT), node.name, n, lines[first - 2].strip()


def test_few_functions_are_long_and_each_says_why():
    found = list(long_functions())
    unmarked = [f"{p}: {name} ({n} lines)" for p, name, n, above in found if not above.startswith(LONG_MARK)]
    assert not unmarked, (
        f"over {MAX_FUNCTION_LINES} lines without a '{LONG_MARK} <reason>' comment:\n" + "\n".join(unmarked)
    )
    assert len(found) <= MAX_LONG_FUNCTIONS, "split one of:\n" + "\n".join(
        f"{p}: {name}" for p, name, *_ in found
    )


def test_every_part_says_what_it_owns_and_may_import():
    for part, folder in FOLDERS.items():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "import" in doc, f"{part}/__init__.py: no docstring saying what it may import"

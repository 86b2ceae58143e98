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

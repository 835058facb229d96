"""Imports point one way only: step_methods -> core -> surrogates (GUIDE.md §2).

``surrogates`` is numpy/scipy only; ``core`` is numpy only, pure functions: neither may
import PyMC or PyTensor, and no layer imports one above it. Read from the source (AST),
so that a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_surrogate"
FORBIDDEN = {
    "surrogates": ("pymc_surrogate.core", "pymc_surrogate.step_methods", "pymc", "pytensor"),
    "core": ("pymc_surrogate.step_methods", "pymc", "pytensor"),
}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[: -node.level]
                names.add(".".join([*parts, node.module] if node.module else parts))
            else:
                names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_down_only(layer):
    offences = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[layer])
    ]
    assert not offences, "\n".join(offences)


def test_the_check_sees_a_lazy_import(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from pymc.step_methods import step_sizes\n")
    assert "pymc.step_methods" in imported_modules(source)

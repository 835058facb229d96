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


STEP_CLASSES = ("base", "surrogate_hmc", "adaptive_surrogate_hmc", "variational_hmc",
                "kernel_hmc", "sparse_grid_hmc")
PART_FOLDERS = ("evaluation", "warmup", "kernels", "adaptation", "health", "grid")


def test_parts_never_import_step_classes():
    """A step is composed of parts (GUIDE.md §2): the parts, in the role folders of
    ``step_methods``, never import the step classes that own them."""
    step_methods = PACKAGE / "step_methods"
    forbidden = tuple(f"pymc_surrogate.step_methods.{name}" for name in STEP_CLASSES)
    offences = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for folder in PART_FOLDERS
        for path in sorted((step_methods / folder).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name in forbidden or name == "pymc_surrogate.step_methods"
    ]
    assert not offences, "\n".join(offences)


def test_every_role_folder_exists():
    """The check above would pass on a folder renamed away: each must hold modules."""
    for folder in PART_FOLDERS:
        assert len(list((PACKAGE / "step_methods" / folder).glob("*.py"))) > 1, folder


def test_the_part_check_sees_an_import_of_a_step_class(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from pymc_surrogate.step_methods.base import SurrogateStep\n")
    assert "pymc_surrogate.step_methods.base" in imported_modules(source)

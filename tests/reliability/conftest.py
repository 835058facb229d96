"""Parametrisation of the reliability suite over the registry of step methods.

A test that takes ``step`` runs once per entry of ``registry.STEPS`` (every class in
``pymc_surrogate.STEP_METHODS``, default settings); one that takes ``exact_step`` once per
entry of ``registry.EXACTNESS_STEPS`` (also the non-default variants).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.reliability.registry import EXACTNESS_STEPS, STEPS

RESULTS_DIR = Path(__file__).parent / "results"


def pytest_generate_tests(metafunc):
    for argname, entries in (("step", STEPS), ("exact_step", EXACTNESS_STEPS)):
        if argname in metafunc.fixturenames:
            metafunc.parametrize(argname, [pytest.param(e, id=e.id) for e in entries])


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items):
    # A test's ``known_defects`` (key -> measured reason) runs the matching cases under the
    # ``experimental`` marker: a named, documented defect, not a silent skip. A key is an
    # entry id ("KernelHMC") or several parts of a case id joined by "-"
    # ("KernelHMC-flat_box-gradient"); it matches a case whose id holds every part.
    # A test's ``ci_entries`` (entry ids) is its short form: other entries carry ``slow``.
    for item in items:
        function = getattr(item, "function", None)
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        parts = set(callspec.id.split("-"))
        defects = getattr(function, "known_defects", {})
        if any(set(key.split("-")) <= parts for key in defects):
            item.add_marker(pytest.mark.experimental)
        short_form = getattr(function, "ci_entries", None)
        if short_form is not None and not parts & set(short_form):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _quiet_pymc():
    # PyMC logs a few lines per pm.sample call; hundreds of calls drown pytest's output.
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(scope="session")
def results_dir() -> Path:
    """``tests/reliability/results/`` (git-ignored): where long runs record their numbers."""
    RESULTS_DIR.mkdir(exist_ok=True)
    ignore = RESULTS_DIR / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    return RESULTS_DIR

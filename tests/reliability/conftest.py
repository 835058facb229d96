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
    # A test's ``known_defects`` (entry id -> measured reason) runs those entries under the
    # ``experimental`` marker: a named, documented defect, not a silent skip.
    defects = getattr(metafunc.function, "known_defects", {})
    for argname, entries in (("step", STEPS), ("exact_step", EXACTNESS_STEPS)):
        if argname in metafunc.fixturenames:
            metafunc.parametrize(argname, [
                pytest.param(e, id=e.id, marks=[pytest.mark.experimental] if e.id in defects else [])
                for e in entries
            ])


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

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
    # A test's ``ci_entries`` is its short form: keys as ``known_defects``' (an entry id, or
    # parts of a case id joined by "-"); cases no key matches carry ``slow``.
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
        if short_form is not None and not any(set(key.split("-")) <= parts for key in short_form):
            item.add_marker(pytest.mark.slow)
    _rotate_ci_entries(items)
    _share_between_generations(items)


def _entry_id(item) -> str | None:
    params = item.callspec.params
    entry = params.get("step", params.get("exact_step"))
    return None if entry is None else entry.id


def _rotate_ci_entries(items) -> None:
    """A test's ``ci_rotation = k`` is its short form over the step methods: each of its
    cases (the other parameters) runs in CI for ``k`` entries, the next ``k`` in registry
    order after the previous case's, so that across the cases every entry still runs in
    CI (when cases x k >= entries); the other entries carry ``slow``. Cases already
    ``slow`` or ``experimental`` are neither chosen nor counted."""
    groups: dict = {}
    for item in items:
        function = getattr(item, "function", None)
        k = getattr(function, "ci_rotation", None)
        if k is None or getattr(item, "callspec", None) is None or _entry_id(item) is None:
            continue
        if item.get_closest_marker("slow") or item.get_closest_marker("experimental"):
            continue
        case = item.callspec.id.replace(_entry_id(item), "", 1)
        groups.setdefault(function, {}).setdefault(case, []).append(item)
    for function, cases in groups.items():
        for offset, members in enumerate(cases.values()):
            k = min(function.ci_rotation, len(members))
            chosen = {(offset * k + j) % len(members) for j in range(k)}
            for index, item in enumerate(members):
                if index not in chosen:
                    item.add_marker(pytest.mark.slow)


#: Where ``_share_between_generations`` applies: the statistical checks of the samplers'
#: numerics, and the benchmark scripts' smoke runs. Not the bad-input messages (cheap, and version-specific); in the sampling
#: modes, which exercise PyMC's own machinery, a check with one CI case runs it in both.
SHARED_BETWEEN_GENERATIONS = (
    "tests/reliability/", "tests/core/", "tests/surrogates/", "tests/benchmarks/",
)
SHARED_EXCEPT = ("tests/reliability/test_bad_input.py",)
SINGLE_CASE_IN_BOTH = ("tests/reliability/test_sampling_modes.py",)


def _generation() -> int:
    import pymc

    return int(pymc.__version__.split(".")[0])


def _share_between_generations(items) -> None:
    """The two PyMC generations share the CI cases of the statistical checks, half each;
    the other half carries ``slow``. A check with several CI cases runs in both generations
    (alternate cases in each); one with a single case runs it in one generation, the next
    such check in the other; every case is in CI once across the two.

    The checks are of the samplers' numerics (numpy, the same code under both
    generations); what is generation-specific (PyMC's sampling loop, compound steps,
    processes, PyTensor's backends) runs in both through the checks' other cases, the
    sampling modes, the unit tests and the golden draws. Successive checks start on
    alternate halves, so that neither generation gets the heavier case of every pair. A
    test outside ``SHARED_BETWEEN_GENERATIONS`` opts in with
    ``pytest.mark.shared_between_generations``."""
    parity = _generation() % 2
    checks: dict = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        shared = (path.startswith(SHARED_BETWEEN_GENERATIONS) and not path.startswith(SHARED_EXCEPT)
                  ) or item.get_closest_marker("shared_between_generations")
        if not shared or item.get_closest_marker("slow") or item.get_closest_marker("experimental"):
            continue
        checks.setdefault(item.nodeid.split("[")[0], []).append(item)
    for offset, (check, cases) in enumerate(checks.items()):
        if len(cases) == 1 and check.startswith(SINGLE_CASE_IN_BOTH):
            continue
        for index, item in enumerate(cases):
            if (index + offset) % 2 != parity:
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

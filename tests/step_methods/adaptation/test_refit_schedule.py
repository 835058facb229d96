"""When a chain refits in tune (``step_methods/adaptation/refit_schedule.py``)."""

from __future__ import annotations

import copy

import pytest

from pymc_surrogate.step_methods.adaptation.refit_schedule import RefitSchedule
from pymc_surrogate.step_methods.tuning import TUNING


def test_a_new_chain_fits_at_once_then_at_geometrically_spaced_iterations():
    schedule = RefitSchedule(TUNING)
    assert schedule.due(0, tempered=False)
    schedule.fitted(100, first=True)  # next due at 1.5 * 101 + 50 = 201.5
    assert schedule.first_iteration == 100
    assert not schedule.due(200, tempered=False)
    assert schedule.due(201, tempered=False)
    assert schedule.due(171, tempered=True)  # tempered: 1.2 * 101 + 50 = 171.2
    assert not schedule.due(169, tempered=True)


@pytest.mark.parametrize("acceptance, refits", [(0.5, True), (0.95, False)])
def test_a_due_refit_is_postponed_while_the_corrections_accept_well(acceptance, refits):
    schedule = RefitSchedule(TUNING)
    schedule.fitted(100, first=True)
    for _ in range(5):
        schedule.note(acceptance)
    assert not schedule.wants_refit(150, tempered=False)  # not due yet: nothing changes
    assert len(schedule.accept_since) == 5
    assert schedule.wants_refit(250, tempered=False) is refits
    # postponed: the schedule counts from iteration 250 on, with no acceptances yet
    assert (schedule.last_iteration, len(schedule.accept_since)) == ((101, 5) if refits
                                                                     else (251, 0))


def test_a_failed_fit_is_retried_on_the_schedule_and_says_why():
    schedule = RefitSchedule(TUNING)
    schedule.failed(60, ValueError("singular"))
    assert schedule.last_error == "ValueError: singular"
    assert not schedule.due(61, tempered=False)
    schedule.fitted(200, first=False)
    assert schedule.last_error is None and schedule.first_iteration == 0


def test_the_draws_inner_moves_see_only_the_last_window_and_a_new_chain_none():
    schedule = RefitSchedule(TUNING)
    for _ in range(TUNING.inner_window + 30):
        schedule.note(1.0)
    assert len(schedule.recent_corrections) == TUNING.inner_window
    state = copy.deepcopy(schedule.sampling_state)
    schedule.reset()
    assert len(schedule.recent_corrections) == 0
    assert schedule.recent_corrections.maxlen == TUNING.inner_window
    schedule.sampling_state = state  # PyMC restores a chain's state between chains
    assert len(schedule.recent_corrections) == TUNING.inner_window

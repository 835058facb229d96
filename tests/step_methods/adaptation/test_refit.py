"""What a refit learns from (``step_methods/adaptation/refit.py``)."""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.warmup.mode_climb import climb_to_mode


def test_fit_learns_from_where_the_chain_is_not_from_a_funnels_neck():
    """Neal's funnel, d = 10: the start-of-tune climb from (v, x) = (2, 1) evaluates the
    density's peak deep in the neck (v near -40, potential near -80, no mass), and the
    energy window was referenced to it: at every fit it kept 3 of 717-2365 points and
    every fit failed. Given a chain whose states are funnel draws, the points a fit learns
    from must be most of those draws (85% at this seed; the rest lie above the window, in
    the mouth), and nothing deeper than ``mode_depth`` below the chain's lowest state.
    Without the floor: 1% of them."""
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2), shape=9)
    with model:
        step = SurrogateHMC()
    chain = step.chain
    start = step._evaluate(chain, np.r_[2.0, np.ones(9)], with_grad=True)
    climb_to_mode(start, lambda q: step._evaluate(chain, q, with_grad=True),
                  lambda q: step.evaluator.evaluate(chain, q, True, True), step.tuning)
    assert step.learned.training.potentials.min() < -50  # the climb did reach the neck

    rng = np.random.default_rng(0)
    v_draws = rng.normal(0.0, 3.0, 300)
    draws = np.column_stack([v_draws, rng.normal(size=(300, 9)) * np.exp(v_draws / 2)[:, None]])
    first_draw = len(step.learned.training)
    for q in draws:
        point = step._evaluate(chain, q, with_grad=True)
        step.learned.add_state(point.q, point.potential)

    keep = step.refits.relevant()
    kept_draws = np.mean(np.isin(np.arange(first_draw, first_draw + 300), keep))
    assert kept_draws >= 0.75, kept_draws
    floor = step.refits.late_states()[1].min() - step.policy.mode_depth(step.dim)
    assert step.learned.training.potentials[keep].min() >= floor

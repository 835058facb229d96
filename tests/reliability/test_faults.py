"""Robustness under faults: NaN / -inf regions, Ops that raise, degenerate data and scales.

A proposal where the logp is NaN or -inf must be rejected (never accepted, never a crash);
an Op that raises at the chain's starting point must surface with its own message and the
sampler iteration (at a proposal it is a rejection: ``test_eval_failures.py``); data the
surrogate cannot learn from (constant values, huge or tiny magnitudes, a rough potential,
too few points) must never put a NaN into a trajectory, and the draws must stay exact.
Runs once per step method in ``registry.STEPS``.
"""

from __future__ import annotations

import re

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.raise_op import Assert

from tests.reliability.registry import designed
from tests.reliability.helpers import (
    BlackBoxLogp,
    assert_healthy,
    check_moments,
    assert_moments,
    black_box_step,
    recorded_warnings,
    sample,
    warning_messages,
)

EDGE = 1.0  # the bad region is x[0] > EDGE


def first_coordinate_moments(log_density, lower=-12.0, upper=EDGE, n=2_000_001):
    """Mean and sd of a 1-d density known up to a constant, by the trapezoid rule."""
    grid = np.linspace(lower, upper, n)
    logw = log_density(grid)
    w = np.exp(logw - logw.max())
    w /= np.trapezoid(w, grid)
    mean = np.trapezoid(w * grid, grid)
    return mean, np.sqrt(np.trapezoid(w * (grid - mean) ** 2, grid))


# kind -> (PyTensor term added to logp, numpy version, log density of x[0] on x0 < EDGE)
def _switch(value):
    return (
        lambda x: pt.switch(x[0] > EDGE, value, 0.0),
        lambda x: value if x[0] > EDGE else 0.0,
        lambda g: -0.5 * g**2,
    )


BAD_REGIONS = {
    "nan": _switch(np.nan),
    "-inf": _switch(-np.inf),
    # log of a negative number: NaN logp *and* NaN gradient, as a real model produces.
    "log_negative": (
        lambda x: pt.log(EDGE - x[0]),
        lambda x: np.log(EDGE - x[0]) if x[0] < EDGE else np.nan,
        lambda g: -0.5 * g**2 + np.log(EDGE - np.minimum(g, EDGE - 1e-300)),
    ),
}


@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
@pytest.mark.parametrize("kind", list(BAD_REGIONS))
def test_bad_region_is_rejected(step, kind, black_box):
    term, numpy_term, log_density = BAD_REGIONS[kind]
    with pm.Model():
        if black_box:
            x = pm.Flat("x", shape=2, initval=np.array([-0.5, 0.0]))

            def logp(q):
                with np.errstate(invalid="ignore"):
                    return -0.5 * q @ q + numpy_term(q)

            pm.Potential("lik", BlackBoxLogp(logp, f"bad_{kind}")(x))
        else:
            x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.0]))
            pm.Potential("bad", term(x))
        s = black_box_step(step)
        idata = sample(s, tune=600, draws=1500)
    assert_healthy(idata)
    draws = idata.posterior["x"].values
    assert draws[..., 0].max() < EDGE, "a draw in the region where the logp is NaN / -inf"
    mean0, sd0 = first_coordinate_moments(log_density)
    assert_moments(idata, "x", [mean0, 0.0], [sd0, 1.0])


test_bad_region_is_rejected.known_defects = {
    # Measured 2026-11-27: since the black-box population of ef4f8dd, PyMC 5.28.5 at the
    # suite's seed (nan and -inf give the same draws): x[1]'s sd z = -3.92 against the
    # limit 3.84 (chain sds 0.94 and less, per-chain ESS 1126-1859), no region draw; right
    # at seeds 1-4 before and after that commit, and on PyMC 6 at the suite's seed.
    # KernelHMC's sds run narrow (issue 34, "KernelHMC calibrated", open).
    "KernelHMC-nan-black_box": "x[1]'s sd 3.9 MCSE low at the suite's seed on PyMC 5",
    "KernelHMC--inf-black_box": "the same draws as the nan case",
    # Measured 2026-11-28: since the shared store (chain 2 fits on chain 1's evaluations),
    # PyMC 5.28.5 at the suite's seed: x[1]'s sd z = -3.95 against the limit 3.84, no
    # region draw. At seeds 100-119 with the store every run passes this check (x[1]'s sd z:
    # mean -0.08, sd 0.76, largest 1.77): this seed's draws, not a narrow sampler.
    "AdaptiveSurrogateHMC-log_negative-black_box": "x[1]'s sd 3.95 MCSE low at the suite's seed",
}
test_bad_region_is_rejected.ci_rotation = 2  # CI: 2 entries a region and gradient source


# -------------------------------------------------------------- Ops that raise
MESSAGE = "solver did not converge"


def _fragile_model(gradient: bool):
    """logp = -|x|^2 / 2, but the 'solver' raises when any x_i > 2.5, as at the initial
    point: a failure there stops the run (at a proposal it is a rejection)."""
    start = np.array([3.0, 0.0])
    if gradient:
        x = pm.Normal("x", 0.0, 1.0, shape=2, initval=start)
        ok = pt.all(x < 2.5)
        pm.Potential("solver", Assert(MESSAGE)(pt.constant(0.0, dtype="float64"), ok))
        return
    x = pm.Flat("x", shape=2, initval=start)

    def fragile(q):
        if np.any(q > 2.5):
            raise RuntimeError(f"{MESSAGE} at {q}")
        return -0.5 * q @ q

    pm.Potential("lik", BlackBoxLogp(fragile, "fragile")(x))


def _messages(err: BaseException) -> str:
    texts = []
    while err is not None:
        texts.append(str(err))
        err = err.__cause__ or err.__context__
    return "\n".join(texts)


@pytest.mark.parametrize("gradient", [False, True], ids=["black_box", "gradient"])
def test_op_error_names_the_op_message_and_the_iteration(step, gradient):
    completed = []

    def callback(trace, draw):
        completed.append(draw.draw_idx)

    with pm.Model():
        _fragile_model(gradient)
        s = black_box_step(step)
        with pytest.raises(Exception) as info:
            sample(s, chains=1, tune=300, draws=3000, callback=callback)
    text = _messages(info.value)
    assert MESSAGE in text
    # The failing iteration is the one after the last draw PyMC recorded (0-based, tune
    # included), and the message names it.
    failing = (completed[-1] + 1) if completed else 0
    first = str(info.value)
    assert re.search(rf"\b(iteration|draw)\b\D{{0,20}}\b{failing}\b", first), first[:300]
    # The error is the sampler's, not an unrelated traceback from deeper down.
    assert MESSAGE in first


def test_op_error_surfaces_from_worker_processes(step):
    with pm.Model():
        _fragile_model(gradient=False)
        s = black_box_step(step)
        with pytest.raises(Exception) as info:
            sample(s, chains=2, cores=2, tune=300, draws=3000)
    text = _messages(info.value)
    assert MESSAGE in text
    assert re.search(r"\b(iteration|draw)\b\D{0,20}\d+", text)


def test_op_error_pickles_with_its_cause_chain(step):
    """Importing dask.distributed installs tblib's pickling of exception chains; a worker
    then pickles our error *with its causes*, and PyTensor's error held the user's Op (a
    local function here): the parent saw "Connection reset by peer" instead of the message.
    The chain must pickle whatever the model's Op holds."""
    import pickle

    pickling_support = pytest.importorskip("tblib.pickling_support")
    with pm.Model():
        _fragile_model(gradient=False)
        with pytest.raises(Exception) as info:
            sample(black_box_step(step), chains=1, tune=300, draws=3000)
    pickling_support.install(info.value)  # for the classes in this chain only
    restored = pickle.loads(pickle.dumps(info.value))
    assert MESSAGE in _messages(restored)


# ------------------------------------------------------- degenerate training data
def _flat_box():
    """Uniform(0, 1)^2 with no transform: every finite logp value is the same constant,
    and -inf outside. The surrogate sees constant values and zero gradients."""
    with pm.Model() as model:
        pm.Uniform("u", 0.0, 1.0, shape=2, default_transform=None, initval=np.array([0.3, 0.6]))
    return model, "u", np.full(2, 0.5), np.full(2, np.sqrt(1 / 12))


def _tiny_scale():
    """A Flat variable pinned by a likelihood of sd 1e-8: potentials of ~1e16 curvature."""
    obs = np.array([3e-8, -1e-8])
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Normal("y", mu=x, sigma=1e-8, observed=obs)
    return model, "x", obs, np.full(2, 1e-8)


def _huge_location():
    with pm.Model() as model:
        pm.Normal("x", mu=1e6, sigma=1e4, shape=2)
    return model, "x", np.full(2, 1e6), np.full(2, 1e4)


def _huge_offset():
    """logp ~ -1e12 everywhere: training values of magnitude 1e12, spread of order 1."""
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Potential("offset", pt.constant(-1e12))
    return model, "x", np.zeros(2), np.ones(2)


def _steep():
    """Curvature 2e12: training values span ~1e12 within a unit box around the start."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Potential("steep", -1e12 * pt.sum(x**2))
    return model, "x", np.zeros(2), np.full(2, np.sqrt(1 / (1 + 2e12)))


DEGENERATE = {
    "flat_box": _flat_box,
    "tiny_scale": _tiny_scale,
    "huge_location": _huge_location,
    "huge_offset": _huge_offset,
    "steep": _steep,
}


#: Cases whose exploration has to shrink the step size by 1e6-1e8: slow to sample.
SLOW_CASES = ("tiny_scale", "steep")

#: The flat box mixes slowly (ESS 0.02-0.05 per draw, docs/reliability.md "Known
#: defects"): 2 x 1000 draws give a summed ESS of 67-90, below the floor at which MCSE is
#: reliable; 4000 per chain reach it.
DRAWS = {"flat_box": 4000}

CASES = [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in DEGENERATE]


@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
@pytest.mark.parametrize("case", CASES)
def test_degenerate_data_never_yields_nan(step, case, black_box):
    """Short run: no NaN in draws or trajectories, stats finite or the draw flagged."""
    model, var, mean, sd = DEGENERATE[case]()
    with model:
        s = black_box_step(step, use_gradient=False if black_box else "auto")
        idata = sample(s, tune=300, draws=200, chains=1)
    assert_healthy(idata)


test_degenerate_data_never_yields_nan.ci_rotation = 1  # CI: one entry a case; SLOW_CASES slow


@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
@pytest.mark.parametrize("case", CASES)
def test_degenerate_data_right(step, case, black_box):
    """Full run: the draws recover the posterior, whatever the sampler said on the way.

    A warning ("correct but slower", a fallback) or divergent draws do not excuse wrong
    draws: an exact sampler that warns is still exact, so the moments are always checked
    (an earlier version skipped them whenever the step warned)."""
    model, var, mean, sd = DEGENERATE[case]()
    with model:
        s = black_box_step(step, use_gradient=False if black_box else "auto")
        with recorded_warnings():
            idata = sample(s, tune=600, draws=DRAWS.get(case, 1000))
    assert_healthy(idata)
    assert_moments(idata, var, mean, sd)


test_degenerate_data_right.known_defects = {
    # Measured 2026-11-27 (PyMC 5.28.5, 2 x (600 + 4000)): wrong at 5 of seeds 1-10 (two with
    # a chain confined to a third of the box, chain sds 0.15-0.21 against 0.29; at CI's seed
    # one chain's u[0] in [0, 0.11]), the black box right at 10 of 10. Exact HMC explores
    # first, and with zero gradients every trajectory is a straight line that mostly leaves
    # the box: the ~140 exploration states sit in a corner, the fit to them (lam 30: its
    # Gaussian base) is that corner, and the chain, learning from its own states, stays.
    "KernelHMC-flat_box-gradient": "a surrogate learnt from the chain's states keeps the "
                                   "corner its exploration saw (docs/reliability.md, Known bugs)",
    # Measured 2026-12-03 at CI's seed: on PyMC 6.4 chain 0 hardly moves (ESS of x 6-7 over
    # both chains, R-hat 1.19-1.27, chain means 1.0104e6 / 1.0081e6 against 1e6, sd 1e4),
    # told twice (a fallback to the exploration kernel in 25% of its draws, an ESS of 4 in
    # its first 400 draws); on PyMC 5.28 the same case passes. It ran only on PyMC 5 in CI
    # until the generations' split of the CI cases moved it.
    "KernelHMC-huge_location-black_box": "on PyMC 6 a chain sticks at the suite's seed, "
                                         "warned (docs/reliability.md, Known bugs)",
}
test_degenerate_data_right.ci_rotation = 1  # CI: one entry a case and gradient source


def test_rough_potential_stays_exact(step):
    """A potential no smooth surrogate can follow (|x|^2/2 - 2 sin(1e4 x) per coordinate):
    right, or the step said the draws are poor.

    At every sampler's scale this potential is a noisy likelihood (noise sd 1.4 nats, a
    new value wherever a proposal lands), so an exact chain with a smooth proposal is
    sticky: it stays at a point whose noise is high. Whether 2 x 3000 draws then pass the
    moment check is luck: on PyMC 5, SurrogateHMC failed it at seeds 1 and 3 of 20240, 1-3,
    KernelHMC at 20240, 1 and 2 of 20240, 1-5, each KernelHMC run warning that a chain
    was stuck or had an ESS of 3-21. Wrong *and silent* is what this test fails.
    """

    def logp(q):
        return -0.5 * q @ q + 2.0 * np.sum(np.sin(1e4 * q))

    if step.cls.learns_from_gradients:
        # Its finite-difference gradient is the potential's true one, 2e4 cos(1e4 x): like
        # any gradient sampler's, the chain stays in one 3e-4-wide well (VariationalHMC:
        # chain sds below 0.005 where the posterior's is 1.0, no warning). A known limit, not tested here.
        pytest.skip("gradient-based: trapped in the potential's microscopic wells, as NUTS")
    grid = np.linspace(-12, 12, 4_000_001)
    w = np.exp(-0.5 * grid**2 + 2.0 * np.sin(1e4 * grid))
    w /= w.sum()
    mean = float((w * grid).sum())
    sd = float(np.sqrt((w * (grid - mean) ** 2).sum()))
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", BlackBoxLogp(logp, "rough")(x))
        s = black_box_step(step)
        with recorded_warnings() as caught:
            idata = sample(s, tune=600, draws=3000)
    assert_healthy(idata)
    # An interpolating grid (SparseGridHMC) reproduces the noise at its nodes; the others
    # are sticky (docstring). Either way the step must say so if the draws are wrong.
    check = check_moments(idata.posterior["x"].values, np.full(2, mean), np.full(2, sd))
    assert check.passed or warning_messages(caught, type(s).__name__), (
        "wrong and silent:\n" + check.report("x"))
    if designed(step.cls):
        return
    fallback = idata.sample_stats["fallback"].values
    if fallback.any():
        # A draw on the exact kernel instead of the surrogate: the user must have been told.
        assert warning_messages(caught, type(s).__name__), "silent fallback"


# SparseGridHMC's entry takes 188 s a generation here (a level-2 grid on a potential no grid
# resolves): under -m slow; every other entry in CI.
test_rough_potential_stays_exact.ci_entries = {
    "SurrogateHMC", "AdaptiveSurrogateHMC", "VariationalHMC", "KernelHMC"}


def test_too_few_points_fall_back_and_say_so(step):
    """d = 20 and 3 tuning iterations: a handful of points in high dimension. The draws
    must use an exact kernel, a warning must say so, and so must ``uses_surrogate``."""
    dim = 20
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=dim)
        s = step()
        # A gradient-free step (KernelHMC's default) falls back to DE-MCz, exact but slow in
        # d = 20: per-chain ESS 2-39 in 1000 draws, under the check's floor of 100 summed.
        draws = 1000 if s.has_gradient else 4000
        with recorded_warnings() as caught:
            idata = sample(s, tune=3, draws=draws)
    assert_healthy(idata)
    messages = warning_messages(caught, type(s).__name__)
    uses = idata.sample_stats["uses_surrogate"].values
    assert messages, "no warning about the short tuning"
    # (SparseGridHMC too: its grid is built from the warm-up, which 3 iterations do not end)
    assert not uses.any(), "a surrogate from a handful of points drove the draws"
    assert idata.sample_stats["fallback"].values.all(), "fallback draws not marked"
    assert_moments(idata, "x", np.zeros(dim), np.ones(dim))


test_too_few_points_fall_back_and_say_so.ci_entries = {"SurrogateHMC", "SparseGridHMC"}

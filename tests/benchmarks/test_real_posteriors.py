"""The posteriordb suite: every registered posterior builds and matches its reference file,
and the runner (``benchmarks/real_posteriors.py``) runs end to end.

The statistical comparison itself is the runner's job; here only what cannot rot silently:
model construction, parameter names and sizes against the vendored reference, a finite logp
at the reference mean, evaluation counting, the band formula, and a short run.
"""

from __future__ import annotations

import math

import cloudpickle
import numpy as np
import pandas as pd
import pytest

from benchmarks import posteriordb as pdb
from benchmarks.harness import model_has_gradient
from benchmarks.posteriordb.reference import (
    load_reference,
    parse_param_name,
    reference_arrays,
    value_point,
    variable_shapes,
)
from benchmarks.real_posteriors import (
    COLUMNS,
    SHORT,
    SHORT_POSTERIORS,
    Z_LIMIT,
    classify,
    run_real_posteriors,
    tail_band,
)

POSTERIORS = pdb.posterior_names()
#: Parameters whose mean has no MCSE (infinite posterior variance).
NO_YARDSTICK = {"one_comp_mm_elim_abs-one_comp_mm_elim_abs": ("K_m", "V_m")}


def test_every_module_imports():
    assert pdb.discovery_errors() == {}
    assert POSTERIORS, "no posterior registered"
    assert set(SHORT_POSTERIORS) <= set(POSTERIORS)


@pytest.mark.parametrize("posterior", POSTERIORS)
def test_model_matches_reference(posterior):
    model, info = pdb.make_model(posterior)
    assert info.name == posterior
    assert set(info.param_names) == {rv.name for rv in model.free_RVs}
    assert info.has_gradient == model_has_gradient(model)
    module = pdb.get_module(posterior)
    assert module.__doc__ and posterior in module.__doc__

    reference = load_reference(posterior)
    assert reference["source"]
    # Raises unless the reference names exactly the entries of the trace variables.
    ref = reference_arrays(
        reference, variable_shapes(model, info.param_names), pdb.param_rename(posterior)
    )
    for stat in ("mean", "sd", "q01", "q99"):
        if stat not in ref and stat.startswith("q"):
            continue  # summarised without quantiles: the runner reports tails_ok = n/a
        for var in info.param_names:
            assert np.all(np.isfinite(ref[stat][var])), (stat, var)
    if "q01" in ref:
        assert all(np.all(ref["q01"][v] < ref["q99"][v]) for v in info.param_names)

    before = info.counter.logp
    logp = model.compile_logp()(value_point(model, ref["mean"]))
    assert np.isfinite(logp)
    assert info.counter.logp > before, "the likelihood is not routed through count_evaluations"

    # Picklable (with cloudpickle, as PyMC's multiprocess sampling needs), same density.
    clone = cloudpickle.loads(cloudpickle.dumps(model))
    assert clone.compile_logp()(value_point(clone, ref["mean"])) == pytest.approx(logp)


def test_param_names():
    assert parse_param_name("sigma") == ("sigma", ())
    assert parse_param_name("theta[3]") == ("theta", (2,))
    assert parse_param_name("z[2, 1]") == ("z", (1, 0))
    with pytest.raises(ValueError):
        parse_param_name("theta[0]")


def test_tail_band_and_status():
    lo, hi = tail_band(400)
    assert lo == 0.0 and hi == pytest.approx(12 / 400)  # Binomial(400, 0.01): 99.95 % at 12
    lo, hi = tail_band(10_000)
    assert 0.0065 < lo < 0.01 < hi < 0.0135
    row = {"max_abs_z": 1.0, "max_rhat": 1.005, "tails_ok": True, "n_warnings": 0,
           "divergences": 0}
    assert classify(row) == "ok"
    assert classify({**row, "divergences": 2}) == "warned"
    assert classify({**row, "n_warnings": 1}) == "warned"
    assert classify({**row, "max_abs_z": 4.5}) == "wrong"
    assert classify({**row, "max_abs_z": math.inf}) == "wrong"
    assert classify({**row, "max_rhat": 1.02}) == "wrong"
    assert classify({**row, "tails_ok": False, "n_warnings": 3}) == "wrong"
    assert classify({**row, "tails_ok": "n/a"}) == "ok"  # no reference quantiles


def test_short_run(tmp_path):
    """NUTS and one step method on one cheap posterior, short settings (~30-60 s)."""
    from pymc_surrogate import STEP_METHODS

    step = next(iter(STEP_METHODS))
    frame = run_real_posteriors(
        ["arma-arma11"], ["NUTS", step], **SHORT, seed=3, out_dir=tmp_path, tag="short",
        verbose=False,
    )
    assert list(frame.columns) == COLUMNS
    assert list(frame["sampler"]) == ["NUTS", step]
    assert (tmp_path / "short.md").exists() and (tmp_path / "short.csv").exists()
    for _, row in frame.iterrows():
        assert row["status"] in ("ok", "warned", "wrong"), row["note"]
        assert row["n_logp"] > 0 and row["wall_s"] > 0
        assert np.isfinite(row["max_abs_z"]) and np.isfinite(row["min_ess_bulk"])
        assert 0.5 < row["sd_ratio_min"] <= row["sd_ratio_max"] < 2.0
    assert frame.loc[frame["sampler"] == "NUTS", "n_grad"].iloc[0] > 0


def test_warnings_are_captured():
    """A step's warning (here: tuning too short to fit a surrogate) reaches the table."""
    # draws >= 100: PyMC's own "only N samples per chain" warning would come first.
    frame = run_real_posteriors(
        ["arma-arma11"], ["SurrogateHMC"], draws=100, tune=20, chains=1, out_dir=None,
        verbose=False,
    )
    row = frame.iloc[0]
    assert row["n_warnings"] >= 1
    assert row["first_warning"].startswith("SurrogateHMC: ")
    assert row["status"] in ("warned", "wrong")


def test_short_form_command(tmp_path):
    """The documented ``--short`` command, every default sampler (a few minutes): no step
    method of ours is wrong in silence (``|z| > 4`` of a mean with no warning).

    Short runs are noisy in R-hat and tail shares, which the full table judges; the
    z-score of a mean is calibrated by its own MCSE even at 2 x 200 draws. Power: before
    the Newton-Hessian start, kilpisjarvi's SurrogateHMC row had |z| 52-366.
    """
    from benchmarks.real_posteriors import main
    from pymc_surrogate import STEP_METHODS

    assert main(["--short", "--out", str(tmp_path), "--tag", "short"]) == 0
    text = (tmp_path / "short.md").read_text()
    for posterior in SHORT_POSTERIORS:
        assert posterior in text
    assert "DEMetropolisZ" in text  # added on the black-box ODE posterior
    frame = pd.read_csv(tmp_path / "short.csv")
    ours = frame[frame["sampler"].isin(list(STEP_METHODS))]
    # the default samplers of ours (benchmarks.real_posteriors.DEFAULT_SAMPLERS) on every posterior
    from benchmarks.real_posteriors import DEFAULT_SAMPLERS

    default_ours = [name for name in DEFAULT_SAMPLERS if name in STEP_METHODS]
    assert len(ours) == len(SHORT_POSTERIORS) * len(default_ours)
    told = ours.set_index(["posterior", "sampler"])["n_warnings"] > 0
    params = pd.read_csv(tmp_path / "short_parameters.csv")
    params = params[params["sampler"].isin(list(STEP_METHODS))]
    # one_comp's K_m and V_m have infinite posterior variance (VALIDATION.md): a z-score
    # of their means has no yardstick (posteriordb's own long runs: |z| up to 6.4)
    measurable = [name not in NO_YARDSTICK.get(post, ())
                  for post, name in zip(params["posterior"], params["parameter"])]
    params = params[measurable]
    wrong = params[params["z"].abs() > Z_LIMIT]
    silent = [key for key in zip(wrong["posterior"], wrong["sampler"]) if not told[key]]
    assert not silent, wrong.to_string()


def test_ode_op_is_a_black_box():
    """The shared ODE Op: no gradient, zeros (logp -inf) past its budget, picklable."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.gradient import NullTypeGradError

    from benchmarks.posteriordb import lotka_volterra
    from benchmarks.posteriordb.ode import ODESolution

    op = ODESolution(lotka_volterra._lotka_volterra, [1.0, 2.0], n_states=2)
    theta, z0 = np.array([0.5, 0.025, 0.8, 0.025]), np.array([30.0, 4.0])
    assert np.all(op.solve(theta, z0) > 0)
    assert not op.solve(np.r_[np.nan, theta[1:]], z0).any()
    tight = ODESolution(lotka_volterra._lotka_volterra, [1.0, 2.0], n_states=2, max_rhs_calls=5)
    assert not tight.solve(theta, z0).any()
    assert cloudpickle.loads(cloudpickle.dumps(op)) == op
    x = pt.dvector("x")
    with pytest.raises((NotImplementedError, NullTypeGradError)):
        pytensor.grad(op(x, z0).sum(), x)

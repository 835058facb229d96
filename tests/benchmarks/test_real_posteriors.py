"""The posteriordb suite: every registered posterior builds and matches its reference file,
and the runner (``benchmarks/real_posteriors.py``) runs end to end.

The statistical comparison itself is the runner's job; here only what cannot rot silently:
model construction, parameter names and sizes against the vendored reference, a finite logp
at the reference mean, evaluation counting, the band formula, which tail shares the status
checks (below the reference's 2.5 % and above its 97.5 % quantile), and a short run.
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
    QUANTILES,
    REFERENCE_DIR,
    load_reference,
    parse_param_name,
    reference_arrays,
    summarize_draws,
    value_point,
    variable_shapes,
)
from benchmarks.real_posteriors import (
    COLUMNS,
    PARAMETER_COLUMNS,
    SHORT,
    SHORT_POSTERIORS,
    TAIL_LEVEL,
    TAIL_P,
    Z_LIMIT,
    classify,
    compare_with_reference,
    run_real_posteriors,
    tail_band,
)

POSTERIORS = pdb.posterior_names()
#: Parameters whose mean has no MCSE (infinite posterior variance).
NO_YARDSTICK = {"one_comp_mm_elim_abs-one_comp_mm_elim_abs": ("K_m", "V_m")}
#: Quantile keys of a reference summarised from posteriordb's draws, in order.
QUANTILE_KEYS = ("q01", "q025", "q05", "q95", "q975", "q99")


def test_every_module_imports():
    assert pdb.discovery_errors() == {}
    assert POSTERIORS, "no posterior registered"
    assert set(SHORT_POSTERIORS) <= set(POSTERIORS)


@pytest.mark.parametrize("posterior", POSTERIORS)
def test_model_matches_reference(posterior):
    model, info = pdb.make_model(posterior)
    assert info.name == posterior
    module = pdb.get_module(posterior)
    # Compared variables: the free ones, or deterministics the reference draws store (a
    # transformed parameter); a free variable left out is declared in NOT_IN_REFERENCE.
    free = {rv.name for rv in model.free_RVs}
    not_in_reference = set(getattr(module, "NOT_IN_REFERENCE", ()))
    assert set(info.param_names) <= free | {d.name for d in model.deterministics}
    assert free - set(info.param_names) == not_in_reference
    assert info.has_gradient == model_has_gradient(model)
    assert module.__doc__ and posterior in module.__doc__

    reference = load_reference(posterior)
    assert reference["source"]
    # Raises unless the reference names exactly the entries of the trace variables.
    ref = reference_arrays(
        reference, variable_shapes(model, info.param_names), pdb.param_rename(posterior)
    )
    if reference["quantiles"]:  # summarised from posteriordb's draws
        assert reference["quantiles"] == list(QUANTILES)
        assert all(q in ref for q in QUANTILE_KEYS), sorted(ref)
    else:  # summary statistics only: the runner reports tails_ok = n/a
        assert not any(q in ref for q in QUANTILE_KEYS), sorted(ref)
    for stat in ("mean", "sd", *QUANTILE_KEYS):
        if stat not in ref and stat.startswith("q"):
            continue
        for var in info.param_names:
            assert np.all(np.isfinite(ref[stat][var])), (stat, var)
    if "q01" in ref:
        for var in info.param_names:
            levels = np.stack([ref[q][var] for q in QUANTILE_KEYS])
            assert np.all(np.diff(levels, axis=0) >= 0), var
            assert np.all(levels[0] < levels[-1]), var

    before = info.counter.logp
    # Free variables the reference lacks stay at the model's initial point.
    start = {n: ref["mean"][n] for n in info.param_names if n in free}
    initial = model.initial_point()
    for rv in model.free_RVs:
        if rv.name in not_in_reference:
            value = initial[model.rvs_to_values[rv].name]
            assert model.rvs_to_transforms.get(rv) is None, rv.name  # value = constrained value
            start[rv.name] = value
    logp = model.compile_logp()(value_point(model, start))
    assert np.isfinite(logp)
    assert info.counter.logp > before, "the likelihood is not routed through count_evaluations"

    # Picklable (with cloudpickle, as PyMC's multiprocess sampling needs), same density.
    clone = cloudpickle.loads(cloudpickle.dumps(model))
    assert clone.compile_logp()(value_point(clone, start)) == pytest.approx(logp)


def test_param_names():
    assert parse_param_name("sigma") == ("sigma", ())
    assert parse_param_name("theta[3]") == ("theta", (2,))
    assert parse_param_name("z[2, 1]") == ("z", (1, 0))
    with pytest.raises(ValueError):
        parse_param_name("theta[0]")


def test_reference_quantile_keys():
    """2.5 and 97.5 % are kept as ``q025`` / ``q975`` (not rounded to whole percents)."""
    assert {0.025, 0.975} <= set(QUANTILES)
    rng = np.random.default_rng(0)
    chains = [{"a": rng.standard_normal(500).tolist()} for _ in range(4)]
    entry = summarize_draws(chains)["a"]
    assert list(entry) == ["mean", "sd", "mcse_mean", *QUANTILE_KEYS]
    flat = np.ravel([c["a"] for c in chains])
    assert entry["q025"] == pytest.approx(np.quantile(flat, 0.025), abs=1e-12)
    assert entry["q975"] == pytest.approx(np.quantile(flat, 0.975), abs=1e-12)


def test_tail_band_and_status():
    assert TAIL_P == 0.025 and TAIL_LEVEL == 0.999
    lo, hi = tail_band(400)  # Binomial(400, 0.025): 0.05 % quantile 2, 99.95 % quantile 22
    assert (lo, hi) == pytest.approx((2 / 400, 22 / 400))
    lo, hi = tail_band(10_000)
    assert (lo, hi) == pytest.approx((200 / 10_000, 303 / 10_000))
    assert tail_band(400, p=0.01) == pytest.approx((0.0, 12 / 400))  # p still selectable
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


def _synthetic(levels):
    """A 4 x 1000 iid normal trace of one scalar ``x`` and a reference whose quantile keys
    sit at the draws' own empirical ``levels`` (key -> level), so each share is exact."""
    import xarray as xr

    rng = np.random.default_rng(1)
    draws = rng.standard_normal((4, 1000))
    posterior = xr.Dataset({"x": (("chain", "draw"), draws)})
    flat = np.sort(draws.ravel())
    ref = {"mean": {"x": np.array(0.0)}, "sd": {"x": np.array(1.0)}}
    for key, level in levels.items():
        # midway between two order statistics: exactly level * 4000 draws lie below
        k = round(level * flat.size)
        ref[key] = {"x": np.array((flat[k - 1] + flat[k]) / 2)}
    return posterior, ref


RIGHT_LEVELS = {"q01": 0.01, "q025": 0.025, "q05": 0.05, "q95": 0.95, "q975": 0.975,
                "q99": 0.99}


def test_tails_are_the_2_5_and_97_5_percent_shares():
    """``tails_ok``, ``tail_worst`` and ``tail_at`` judge the shares below q025 and above
    q975 against the Binomial(n, 0.025) band; the 1/5/95/99 % shares are only reported."""
    posterior, ref = _synthetic(RIGHT_LEVELS)
    row = compare_with_reference(posterior, ["x"], ref, chains=4)
    lo, hi = tail_band(row["min_ess_tail"])
    assert row["tail_band"] == f"[{lo:.4f}, {hi:.4f}]"
    assert lo < TAIL_P < hi and hi < 0.04  # a 2.5 % band (a 1 % one would end near 0.016)
    assert row["tails_ok"] is True
    assert row["tail_worst"] == pytest.approx(0.025)
    (record,) = row["parameters"]
    assert set(PARAMETER_COLUMNS[2:]) <= set(record) | {"parameter"}
    for key, share in (("below_q01", 0.01), ("below_q025", 0.025), ("below_q05", 0.05),
                       ("above_q95", 0.05), ("above_q975", 0.025), ("above_q99", 0.01)):
        assert record[key] == pytest.approx(share), key

    # 10 % of the draws below the reference's 2.5 % quantile: wrong, although the 1/99 %
    # shares are exact.
    posterior, ref = _synthetic({**RIGHT_LEVELS, "q025": 0.10})
    row = compare_with_reference(posterior, ["x"], ref, chains=4)
    assert row["tails_ok"] is False
    assert row["tail_at"] == "x <q025" and row["tail_worst"] == pytest.approx(0.10)
    posterior, ref = _synthetic({**RIGHT_LEVELS, "q975": 0.999})  # 0.1 % above q975
    row = compare_with_reference(posterior, ["x"], ref, chains=4)
    assert row["tails_ok"] is False
    assert row["tail_at"] == "x >q975" and row["tail_worst"] == pytest.approx(0.001)

    # Way off at 1 % and 99 %, exact at 2.5 / 97.5 %: reported, not judged.
    posterior, ref = _synthetic({**RIGHT_LEVELS, "q01": 0.0005, "q99": 0.9})
    row = compare_with_reference(posterior, ["x"], ref, chains=4)
    assert row["tails_ok"] is True and row["tail_at"].split()[-1] in ("<q025", ">q975")
    assert row["parameters"][0]["above_q99"] == pytest.approx(0.10)


def test_tails_need_the_2_5_and_97_5_percent_quantiles():
    """A reference without q025/q975 (with or without the other quantiles): n/a."""
    for levels in ({"q01": 0.01, "q05": 0.05, "q95": 0.95, "q99": 0.99}, {}):
        posterior, ref = _synthetic(levels)
        row = compare_with_reference(posterior, ["x"], ref, chains=4)
        assert row["tails_ok"] == "n/a"
        assert row["tail_band"] == "no reference q025/q975"
        assert row["tail_at"] == "" and np.isnan(row["tail_worst"])
        assert np.isnan(row["parameters"][0]["below_q025"])
        assert classify({**row, "n_warnings": 0, "divergences": 0}) == "ok"


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
    assert list(pd.read_csv(tmp_path / "short_parameters.csv").columns) == PARAMETER_COLUMNS
    params = frame.attrs["parameters"]
    assert params[["below_q025", "above_q975"]].notna().all().all()
    for _, row in frame.iterrows():
        assert row["tail_at"].split()[-1] in ("<q025", ">q975")  # arma11 has q025/q975
        lo, hi = tail_band(row["min_ess_tail"])
        assert row["tail_band"] == f"[{lo:.4f}, {hi:.4f}]"
        shares = params.loc[params["sampler"] == row["sampler"], ["below_q025", "above_q975"]]
        assert row["tails_ok"] == bool(((shares >= lo) & (shares <= hi)).all().all())
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


# 272 s a generation here (the largest single cost of CI): slow; the runner's end-to-end
# path is CI's test_short_run.
@pytest.mark.slow
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

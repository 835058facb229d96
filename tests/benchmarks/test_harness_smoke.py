"""Smoke test of the benchmark harness, so that it cannot rot.

Tiny models and chains; NUTS, Slice and every step method of the package registry.  Asserts
what the harness writes, not how fast anything is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from benchmarks.harness import (
    COLUMNS,
    SMOKE,
    load_step_registry,
    model_has_gradient,
    needs_gradient,
    reference_moments,
    run_benchmark,
)
from benchmarks import models as models_pkg
from benchmarks.models import EvaluationCounter, ModelInfo, count_evaluations


class _BlackBoxNormalLogp(Op):
    """Standard-normal log density as a Python Op without a gradient."""

    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(-0.5 * np.sum(inputs[0] ** 2))


def _make_blackbox(d: int = 2) -> tuple[pm.Model, ModelInfo]:
    counter = EvaluationCounter()
    with pm.Model() as model:
        x = pm.Flat("x", shape=d)
        pm.Potential("loglik", _BlackBoxNormalLogp()(count_evaluations(x, counter)))
    info = ModelInfo(
        name="blackbox_test",
        counter=counter,
        param_names=["x"],
        ref_mean={"x": np.zeros(d)},
        ref_sd={"x": np.ones(d)},
        has_gradient=False,
    )
    return model, info


@pytest.fixture
def blackbox_registered(monkeypatch):
    sizes = {"smoke": {}, "default": {}, "paper": {}}
    monkeypatch.setitem(models_pkg.MODEL_SIZES, "blackbox_test", (_make_blackbox, sizes))
    builder = models_pkg._SizedBuilder("blackbox_test")
    monkeypatch.setitem(models_pkg.MODELS, "blackbox_test", builder)
    return "blackbox_test"


def test_gradient_detection():
    model, _ = _make_blackbox()
    assert not model_has_gradient(model)
    assert needs_gradient(pm.NUTS, model)
    assert not needs_gradient(pm.Slice, model)
    assert model_has_gradient(models_pkg.MODELS["banana"]("smoke")[0])


def test_smoke_run_writes_table_with_counts(tmp_path, blackbox_registered):
    # PyMC's samplers on all three models; the package's five on the banana only (the
    # five on the gp and black-box models cost 80 s of CI on PyMC 6 and asserted nothing).
    registry, _ = load_step_registry()
    samplers = ["NUTS", "Slice"]
    settings = {**SMOKE, "draws": 60, "tune": 60, "ref_draws": 300, "ref_tune": 200}
    ours = run_benchmark(["banana"], list(registry), out_dir=tmp_path / "results",
                         cache_dir=tmp_path / "cache", tag="smoke_registry", verbose=False,
                         **settings)
    assert sorted(ours.sampler) == sorted(registry)
    for row in ours.itertuples():
        assert row.status == "ok" and row.n_logp > 0 and row.min_ess_bulk > 0, row.note
    frame = run_benchmark(
        ["banana", "gp", blackbox_registered],
        samplers,
        out_dir=tmp_path / "results",
        cache_dir=tmp_path / "cache",
        tag="smoke",
        verbose=False,
        **settings,
    )

    # Files with the expected columns.
    csv = tmp_path / "results" / "smoke.csv"
    md = tmp_path / "results" / "smoke.md"
    assert csv.exists() and md.exists()
    written = pd.read_csv(csv)
    assert list(written.columns) == COLUMNS
    assert list(frame.columns) == COLUMNS
    header = next(line for line in md.read_text().splitlines() if line.startswith("| model"))
    expected = ("min_ess_bulk", "ess_per_s_draws", "n_logp", "n_grad", "evals_per_ess", "mean_err")
    for column in expected:
        assert column in header
    assert "cores=1" in md.read_text()

    # One row per model x sampler.
    assert len(frame) == 3 * len(samplers)
    rows = {(r.model, r.sampler): r for r in frame.itertuples()}

    # PyMC's samplers ran on the models with gradients, and the counter saw them.
    for model in ("banana", "gp"):
        for sampler in ("NUTS", "Slice"):
            row = rows[(model, sampler)]
            assert row.status == "ok", row.note
            assert row.n_logp > 0 and row.min_ess_bulk > 0
            assert row.n_logp_draws > 0 and row.tune_s >= 0 and row.draws_s > 0
            assert np.isfinite(row.mean_err) and np.isfinite(row.sd_err)
        assert rows[(model, "NUTS")].n_grad > 0
        assert rows[(model, "Slice")].n_grad == 0
        assert rows[(model, "NUTS")].baseline == "NUTS"
    assert rows[("banana", "NUTS")].ref_source == "analytic"
    assert rows[("gp", "NUTS")].ref_source.startswith("nuts-cache")

    # NUTS is skipped on the black-box model, Slice runs and is the baseline there.
    assert rows[(blackbox_registered, "NUTS")].status == "skipped"
    slice_row = rows[(blackbox_registered, "Slice")]
    assert slice_row.status == "ok" and slice_row.n_logp > 0 and slice_row.baseline == "Slice"


def test_reference_cache_is_reused(tmp_path):
    model, info = models_pkg.MODELS["gp"]("smoke")
    kwargs = dict(has_gradient=True, cache_dir=tmp_path, draws=100, tune=100, chains=1)
    first = reference_moments("gp", "smoke", model, info, **kwargs)
    cache_file = tmp_path / "gp_smoke.json"
    stamp = cache_file.stat().st_mtime_ns
    before = info.counter.logp
    second = reference_moments("gp", "smoke", model, info, **kwargs)
    assert cache_file.stat().st_mtime_ns == stamp
    assert info.counter.logp - before == 1  # only the fingerprint evaluation
    for name in info.param_names:
        np.testing.assert_allclose(second.mean[name], first.mean[name])
    # A different posterior (other data) invalidates the cache.
    other, other_info = models_pkg.MODELS["gp"]("smoke", seed=7)
    reference_moments("gp", "smoke", other, other_info, **kwargs)
    assert cache_file.stat().st_mtime_ns != stamp

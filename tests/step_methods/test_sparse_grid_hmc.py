"""SparseGridHMC: posteriors recovered, the domain's edge, the precompute (executors,
retries, pickling), save/load, the approximate mode and bad settings."""

import logging
import re
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import cloudpickle
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_surrogate import GridBox
from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.step_methods.grid.domain import GridDomain
from pymc_surrogate.step_methods.sparse_grid_hmc import (
    GridPrecomputeError,
    SparseGridHMC,
)
from pymc_surrogate.surrogates import NaiveGrid, SmolyakGrid
from tests.conftest import gaussian_model

SAMPLE = dict(chains=1, cores=1, progressbar=False, compute_convergence_checks=False)
QUIET = dict(executor="serial", progressbar=False)
MEAN = np.array([1.0, -2.0])
COV = np.array([[1.0, 0.6], [0.6, 2.0]])
BANANA_B = 0.5  # x2 - b x1^2 ~ N(0, 1), x1 ~ N(0, 1): E x2 = b, Var x2 = 1 + 2 b^2


def _assert_moments(draws, mean, sd, z_limit=4.0):
    """Means within ``z_limit`` MCSEs (sd / sqrt(bulk ESS)), and sds within 15%."""
    for column, m, s in zip(draws.T, mean, sd):
        mcse = s / np.sqrt(bulk_ess(column))
        assert abs(column.mean() - m) < z_limit * mcse, (column.mean(), m, mcse)
        assert abs(column.std() - s) < 0.15 * s, (column.std(), s)


def _draws(idata, name="x"):
    values = idata.posterior[name].values
    return values.reshape(-1, values.shape[-1])


class BananaLogp(Op):
    """The banana's log-density as a Python Op with no gradient."""

    __props__ = ()

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        x = inputs[0]
        outputs[0][0] = np.asarray(-0.5 * x[0] ** 2 - 0.5 * (x[1] - BANANA_B * x[0] ** 2) ** 2)


def _banana(black_box):
    with pm.Model() as model:
        if black_box:
            x = pm.Flat("x", shape=2, initval=np.array([0.3, 0.3]))
            pm.Potential("lik", BananaLogp()(x))
        else:
            x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([0.3, 0.3]))
            pm.Potential("lik", -0.5 * (x[1] - BANANA_B * x[0] ** 2) ** 2 + 0.5 * x[1] ** 2)
    return model


BANANA_MEAN = np.array([0.0, BANANA_B])
BANANA_SD = np.array([1.0, np.sqrt(1.0 + 2.0 * BANANA_B**2)])


@pytest.mark.parametrize("black_box", [False, True])
def test_recovers_a_correlated_gaussian(black_box, caplog):
    with gaussian_model(MEAN, COV, black_box=black_box), caplog.at_level("WARNING", logger="pymc"):
        step = SparseGridHMC(**QUIET, rng=1)
        idata = pm.sample(draws=1500, tune=500, step=step, random_seed=3, **SAMPLE)
    _assert_moments(_draws(idata), MEAN, np.sqrt(np.diag(COV)))
    # a box that fits: no false alarm (0 of 6 seeds told, 0.3-1.1% of the draws outside)
    assert not [r for r in caplog.records if "outside the grid's box" in r.getMessage()]
    stats = idata.sample_stats
    assert not stats.approximate.values.any()
    assert stats.in_domain.values.mean() > 0.95
    assert step.precompute_["nodes"] > 100
    if black_box:
        assert int(stats.total_gradient_evals.values[0, -1]) == 0


# Issue 34: the Laplace box at the mode left 4% of the black-box banana outside, past the
# arms' tips, where a black box has only the grid's continuation: x2's sd 0.88-0.91 of the
# truth at 4 of 6 seeds. The box from the warm-up, grown where its faces have not fallen off,
# holds the arms.
@pytest.mark.parametrize("black_box", [False, True])
@pytest.mark.shared_between_generations
def test_recovers_a_banana(black_box):
    with _banana(black_box):
        step = SparseGridHMC(**QUIET, rng=2)
        idata = pm.sample(draws=2000, tune=600, step=step, random_seed=4, **SAMPLE)
    _assert_moments(_draws(idata), BANANA_MEAN, BANANA_SD)


class CountingBanana(BananaLogp):
    """The banana's log-density, counting its calls."""

    calls = 0

    def perform(self, node, inputs, outputs):
        CountingBanana.calls += 1
        super().perform(node, inputs, outputs)


def test_the_constructor_evaluates_nothing_and_the_box_comes_from_the_warm_up(caplog):
    # Before: the constructor ran the Laplace search and the whole grid (1000-odd calls),
    # and the box held one arm of the black-box banana (told at 6 of 6 seeds: 2.3-15.9% of
    # the draws outside, 0.54% for a box that fits).
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.array([0.3, 0.3]))
        pm.Potential("lik", CountingBanana()(x))
        CountingBanana.calls = 0
        step = SparseGridHMC(**QUIET)
        given = SparseGridHMC(domain=GridBox(bounds=(-4.0, 4.0)), surrogate=NaiveGrid(max_nodes=50), **QUIET)
        assert CountingBanana.calls == 0 and step.grid_ is None and given.grid_ is None
        assert given.precompute() is given.grid_ and CountingBanana.calls == given.grid_.n_nodes_
        with pytest.raises(ValueError, match="needs the domain"):
            step.precompute()
        with caplog.at_level("WARNING", logger="pymc"):
            idata = pm.sample(draws=1000, tune=600, step=step, random_seed=4, **SAMPLE)
    # built once the warm-up's explore_steps were done, over both arms and their tips
    assert step.precompute_["boxes"] >= 1
    assert idata.sample_stats.in_domain.values.mean() > 0.97
    assert not [r for r in caplog.records if "outside the grid's box" in r.getMessage()]


@pytest.mark.shared_between_generations
def test_a_gradient_chain_outside_a_small_box_stays_right():
    # The box covers +-0.4 sd: most draws lie outside it, where the model drives them.
    with gaussian_model(MEAN, COV):
        step = SparseGridHMC(domain=GridBox(bounds=(MEAN - 0.4, MEAN + 0.4)), rng=1, **QUIET)
        idata = pm.sample(draws=1500, tune=500, step=step, random_seed=5, **SAMPLE)
    _assert_moments(_draws(idata), MEAN, np.sqrt(np.diag(COV)))
    assert idata.sample_stats.in_domain.values.mean() < 0.5


@pytest.mark.shared_between_generations
def test_a_black_box_chain_outside_a_small_box_is_right_or_told(caplog):
    # Outside the box a black box has only the grid's continuation and the exploration
    # share: measured on PyMC 6 at seeds 5-8, sds 0.54-1.06 of the posterior's (PyMC 5,
    # started at the box centre: 0.84-1.17). Wrong is allowed only with a warning.
    with gaussian_model(MEAN, COV, black_box=True), caplog.at_level("WARNING", logger="pymc"):
        step = SparseGridHMC(domain=GridBox(bounds=(MEAN - 0.4, MEAN + 0.4)), rng=1, **QUIET)
        idata = pm.sample(draws=1500, tune=500, step=step, random_seed=5, **SAMPLE)
    stats = idata.sample_stats
    assert stats.in_domain.values.mean() < 0.5
    assert stats.fallback.values.mean() > 0.2  # the exploration share outside the box
    told = [r.getMessage() for r in caplog.records if "outside the grid's box" in r.getMessage()]
    assert told, "most draws outside the box and nothing said"


def test_mean_and_cov_set_a_rotated_box_and_the_grid_is_shared_by_chains():
    with gaussian_model(MEAN, COV):
        step = SparseGridHMC(domain=GridBox(mean=MEAN, cov=COV, k=2.5), surrogate=NaiveGrid(max_nodes=200), **QUIET)
        step.precompute()
        assert step.precompute_["model_evals"] == step.precompute_["nodes"]
        np.testing.assert_allclose(step.box_cov_, COV / 1.0, rtol=1e-8)
        copy = cloudpickle.loads(cloudpickle.dumps(step))  # what pm.sample sends to workers
        np.testing.assert_array_equal(copy.grid_.values_, step.grid_.values_)
        idata = pm.sample(draws=300, tune=300, step=step, chains=2, cores=2, random_seed=6,
                          progressbar=False, compute_convergence_checks=False)
    assert idata.posterior["x"].shape == (2, 300, 2)


class _MapOnly:
    """An executor with ``map`` only."""

    def map(self, function, batches):
        return map(function, batches)


def test_process_pool_and_serial_give_the_same_grid():
    with gaussian_model(MEAN, COV, black_box=True):
        settings = dict(domain=GridBox(bounds=(MEAN - 2.0, MEAN + 2.0)),
                        surrogate=NaiveGrid(max_nodes=60), progressbar=False)
        serial = SparseGridHMC(executor="serial", **settings).precompute()
        pooled = SparseGridHMC(executor=2, **settings).precompute()
        with ThreadPoolExecutor(2) as pool:  # any Executor: submit, pickled model
            given = SparseGridHMC(executor=pool, **settings).precompute()
        mapped = SparseGridHMC(executor=_MapOnly(), **settings).precompute()
    for other in (pooled, given, mapped):
        np.testing.assert_allclose(other.values_, serial.values_, rtol=1e-12)


def test_dask_executor_gives_the_same_grid():
    distributed = pytest.importorskip("distributed")
    with gaussian_model(MEAN, COV, black_box=True):
        settings = dict(domain=GridBox(bounds=(MEAN - 2.0, MEAN + 2.0)),
                        surrogate=NaiveGrid(max_nodes=60), progressbar=False)
        serial = SparseGridHMC(executor="serial", **settings).precompute()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
            with distributed.Client(cluster) as client:
                dask = SparseGridHMC(executor=client.get_executor(), **settings).precompute()
    np.testing.assert_allclose(dask.values_, serial.values_, rtol=1e-12)


def test_save_and_load_reuse_the_grid(tmp_path):
    path = tmp_path / "grid.npz"
    with gaussian_model(MEAN, COV):
        first = SparseGridHMC(grid=path, domain=GridBox(mean=MEAN, cov=COV), surrogate=NaiveGrid(max_nodes=150), **QUIET)
        first.precompute()
        again = SparseGridHMC(grid=path, **QUIET)
        reused = SparseGridHMC(grid=first.grid_, **QUIET)  # a grid object, as it is
        assert reused.grid_ is first.grid_
        assert again.precompute_["model_evals"] == 0
        np.testing.assert_array_equal(again.grid_.values_, first.grid_.values_)
        np.testing.assert_array_equal(again.grid_.nodes_, first.grid_.nodes_)
        idata = pm.sample(draws=200, tune=200, step=again, random_seed=7, **SAMPLE)
    assert np.all(np.isfinite(_draws(idata)))
    with gaussian_model(np.zeros(3), np.eye(3)):
        with pytest.raises(ValueError, match="d = 2"):
            SparseGridHMC(grid=path, **QUIET)


class FlakyLogp(Op):
    """log N(x; 0, I) that raises at the ``fail_at``-th call, or wherever x[0] > limit."""

    __props__ = ()

    def __init__(self, fail_at=None, limit=np.inf):
        self.fail_at, self.limit, self.calls = fail_at, limit, 0

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        self.calls += 1
        x = inputs[0]
        if self.calls == self.fail_at or x[0] > self.limit:
            raise RuntimeError("solver did not converge")
        outputs[0][0] = np.asarray(-0.5 * x @ x)


def _flaky_model(**kwargs):
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", FlakyLogp(**kwargs)(x))
    return model


def test_a_failed_node_is_retried_once():
    with _flaky_model(fail_at=3):
        step = SparseGridHMC(domain=GridBox(bounds=(-2.0, 2.0)), surrogate=NaiveGrid(max_nodes=50), **QUIET)
        step.precompute()
    assert step.precompute_["retried"] == 1
    nodes = step.grid_.nodes_
    np.testing.assert_allclose(step.grid_.values_, 0.5 * np.sum(nodes**2, axis=1))


def test_a_node_that_fails_twice_is_outside_the_support_and_reported(caplog):
    # A failed node is a rejection (Stan's rule), not the end of the precompute: it is
    # filled as outside the posterior's support, and the first is logged with its point.
    with _flaky_model(limit=1.5), caplog.at_level(logging.WARNING, logger="pymc"):
        step = SparseGridHMC(domain=GridBox(bounds=(-2.0, 2.0)), surrogate=NaiveGrid(max_nodes=50), **QUIET)
        step.precompute()
    nodes = step.grid_.nodes_
    assert step.precompute_["outside_support"] == int(np.sum(nodes[:, 0] > 1.5)) > 0
    told = [r.getMessage() for r in caplog.records if "grid nodes" in r.getMessage()]
    assert told and re.search(r"x = \[ ?2\. .*solver did not converge", told[0]), told


class TruncatedLogp(Op):
    """log N(x; 0, I), and ``outside`` (-inf or NaN) wherever x[0] > 1: a truncation."""

    __props__ = ("outside",)

    def __init__(self, outside):
        self.outside = outside

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        x = inputs[0]
        outputs[0][0] = np.asarray(self.outside if x[0] > 1.0 else -0.5 * x @ x)


@pytest.mark.parametrize("black_box", [True, False], ids=["black_box", "gradient"])
@pytest.mark.parametrize("outside", [-np.inf, np.nan], ids=["-inf", "nan"])
@pytest.mark.shared_between_generations
def test_a_truncation_inside_the_box_is_walled_off_and_sampled_exactly(outside, black_box):
    # Before: every node past the truncation counted as a failed evaluation, and the
    # precompute raised GridPrecomputeError (248 of 961 nodes).
    from scipy.stats import truncnorm

    with pm.Model():
        if black_box:
            x = pm.Flat("x", shape=2, initval=np.array([-0.5, 0.0]))
            pm.Potential("lik", TruncatedLogp(outside)(x))
        else:
            x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.0]))
            pm.Potential("cut", pt.switch(x[0] > 1.0, outside, 0.0))
        step = SparseGridHMC(domain=GridBox(bounds=(-4.0, 4.0)), surrogate=NaiveGrid(max_nodes=500), rng=3, **QUIET)
        step.precompute()
        assert step.precompute_["outside_support"] > 0
        idata = pm.sample(draws=1500, tune=500, step=step, random_seed=3,
                          **{**SAMPLE, "chains": 2})
    draws = _draws(idata)
    assert draws[:, 0].max() <= 1.0
    cut = truncnorm(-np.inf, 1.0)
    _assert_moments(draws, [cut.mean(), 0.0], [cut.std(), 1.0])


def test_a_domain_where_the_logp_is_nowhere_finite_is_named():
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", TruncatedLogp(-np.inf)(x))
        with pytest.raises(GridPrecomputeError, match="-inf or NaN at all"):
            SparseGridHMC(domain=GridBox(bounds=(2.0, 3.0)), surrogate=NaiveGrid(max_nodes=50), **QUIET).precompute()


class LockedLogp(FlakyLogp):
    """Holds a lock, as an Op holding a solver or client handle: it does not pickle."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


def test_an_unpicklable_model_gives_a_clear_error():
    with pm.Model():
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", LockedLogp()(x))
        with pytest.raises(TypeError, match="does not pickle.*executor='serial'"):
            SparseGridHMC(domain=GridBox(bounds=(-2.0, 2.0)), surrogate=NaiveGrid(max_nodes=20), executor="process", progressbar=False).precompute()
        SparseGridHMC(domain=GridBox(bounds=(-2.0, 2.0)), surrogate=NaiveGrid(max_nodes=20), **QUIET).precompute()  # in process: fine


def test_exact_false_is_ghmc_complete_with_a_warning_and_a_stat():
    with gaussian_model(MEAN, COV):
        with pytest.warns(UserWarning, match="GHMC-complete"):
            step = SparseGridHMC(exact=False, **QUIET, rng=1)
        idata = pm.sample(draws=1500, tune=500, step=step, random_seed=8, **SAMPLE)
    stats = idata.sample_stats
    assert stats.approximate.values.all()
    inside = stats.in_domain.values
    # no model evaluation in a draw inside the domain (the grid's energy accepts it)
    assert (stats.model_evals.values[inside] == 0).mean() > 0.9
    _assert_moments(_draws(idata), MEAN, np.sqrt(np.diag(COV)), z_limit=5.0)


@pytest.mark.parametrize(
    "settings, name",
    [
        (dict(domain=dict(k=0.0)), "k must"),
        (dict(exact="yes"), "exact"),
        (dict(kernel=dict(correction="none")), "correction"),
        (dict(kernel=dict(n_inner=0)), "n_inner"),
        (dict(executor=0), "worker processes must be at least 1"),
        (dict(executor="threads"), "executor"),
        (dict(progressbar="yes"), "progressbar"),
        (dict(domain=dict(bounds=([0.0, 1.0], [0.0, 2.0]))), "zero width"),
        (dict(domain=dict(mean=MEAN)), "mean and cov"),
        (dict(domain=dict(bounds=(-1.0, 1.0), mean=MEAN, cov=COV)), "not both"),
        (dict(domain=dict(mean=MEAN, cov=np.diag([1.0, 0.0]))), "positive definite"),
        (dict(surrogate=SmolyakGrid(level=12, max_nodes=1000)), "lower the grid's `level`"),
    ],
)
def test_bad_settings_raise_value_error_naming_them(settings, name):
    with gaussian_model(MEAN, COV):
        with pytest.raises(ValueError, match=name):
            SparseGridHMC(**{**QUIET, **settings})


@pytest.mark.parametrize("flat, spelled", [
    (dict(kind="naive"), "surrogate=SmolyakGrid() or surrogate=NaiveGrid()"),
    (dict(level=3), "surrogate=SmolyakGrid(level=...)"),
    (dict(max_nodes=100), "surrogate=SmolyakGrid(max_nodes=...)"),
    (dict(bounds=(-1.0, 1.0)), "domain=GridBox(bounds=(-1.0, 1.0))"),
    (dict(mean=MEAN, cov=COV, k=2.0), "domain=GridBox(mean="),
    (dict(save_grid="grid.npz"), "grid='file.npz'"),
    (dict(max_workers=2), "executor=<number of worker processes>"),
])
def test_a_setting_of_the_grid_given_flat_is_refused_with_the_spelling_that_works(flat, spelled):
    with gaussian_model(MEAN, COV):
        with pytest.raises(TypeError, match=re.escape(spelled)):
            SparseGridHMC(**{**QUIET, **flat})


def test_a_grid_file_is_built_where_missing_and_reused_where_present(tmp_path, caplog):
    """``grid="file.npz"``: the first run builds and saves it, the next reuses it, and says so."""
    path = tmp_path / "grid.npz"
    with gaussian_model(MEAN, COV), caplog.at_level("INFO", logger="pymc"):
        step = SparseGridHMC(grid=path, domain=GridBox(bounds=(-4.0, 4.0)),
                             surrogate=NaiveGrid(max_nodes=30), **QUIET)
        assert step.grid_ is None and not path.exists()  # nothing evaluated yet
        built = step.precompute()
        assert path.exists() and step.precompute_["saved"]
        assert "is reused" not in caplog.text
        again = SparseGridHMC(grid=path, domain=GridBox(bounds=(-4.0, 4.0)), **QUIET)
    assert again.precompute_["model_evals"] == 0
    assert f"({built.n_nodes_} nodes) is reused: no model evaluation" in caplog.text
    np.testing.assert_array_equal(again.grid_.values_, built.values_)


def test_a_gradient_models_field_is_continuous_across_the_faces_and_its_gradient_right():
    # The grid's interpolation error made a jump at the faces where the field switched to
    # the model (pde d = 20 adjoint: step size driven to 5e-4); now it blends in.
    with _banana(black_box=False):
        step = SparseGridHMC(domain=GridBox(mean=np.zeros(2), cov=np.eye(2), k=1.5), surrogate=NaiveGrid(max_nodes=30), **QUIET)
        step.precompute()
    field = step._surrogate_field(step.chain)
    face = np.array([1.5, 0.3])
    for inside, outside in [(face - [1e-7, 0], face + [1e-7, 0]), (face - [1e-7, 0], face)]:
        assert abs(field(inside)[0] - field(outside)[0]) < 1e-5
    rng = np.random.default_rng(0)
    for q in rng.uniform(1.55, 3.0, size=(10, 2)) * rng.choice([-1, 1], size=(10, 2)):
        value, grad = field(q)
        numeric = [(field(q + h)[0] - field(q - h)[0]) / 2e-6 for h in np.eye(2) * 1e-6]
        np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-5)
    far = np.array([4.0, -4.0])  # beyond the blend: the model itself
    model_value = -step.functions.logp(far)
    assert field(far)[0] == pytest.approx(model_value)


def test_in_a_compound_step_the_grid_is_tilted_to_the_other_blocks_values():
    # x ~ N(0, I), y | x ~ N(x1 - x2 / 2, 1): the grid on x is built at y's initial value;
    # as y moves, x's conditional moves, and the tilted grid with it (exactly: a Gaussian's
    # conditional shifts linearly in q).
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Normal("y", x[0] - 0.5 * x[1], 1.0)
        step = SparseGridHMC([x], domain=GridBox(mean=np.zeros(2), cov=np.eye(2), k=3.0),
                             **QUIET)
        step.precompute()
    (y,) = step.functions.shared.values()

    def model_grad(q):
        return -step.functions.logp_and_grad(q)[1]

    built = step._surrogate_field(step.chain)  # at y's initial value
    points = np.random.default_rng(1).uniform(-2.5, 2.5, size=(5, 2))  # inside the box
    at_start = [(built(q)[1], model_grad(q)) for q in points]
    for y_now in (2.5, -4.0):
        y.set_value(np.asarray(y_now, dtype=y.dtype))
        field = step._surrogate_field(step.chain)
        for q, (grid_then, model_then) in zip(points, at_start):
            np.testing.assert_allclose(field(q)[1] - grid_then, model_grad(q) - model_then,
                                       atol=1e-8)
        face = np.array([3.0, 0.4])  # continuous across the faces at every context
        assert abs(field(face - [1e-7, 0])[0] - field(face + [1e-7, 0])[0]) < 1e-5
    evaluations = step.evaluator.counts.grad_evals
    step._surrogate_field(step.chain)
    assert step.evaluator.counts.grad_evals == evaluations  # one gradient per context


@pytest.mark.parametrize("black_box", [False, True])
def test_in_a_compound_step_only_a_black_box_is_told_that_its_grid_cannot_follow(black_box):
    with _banana(black_box):
        pm.Normal("y", 0.0, 1.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            SparseGridHMC([pm.modelcontext(None)["x"]], **QUIET)
    told = [w for w in caught if "CompoundStep" in str(w.message)]
    assert len(told) == int(black_box), [str(w.message) for w in caught]


def _black_box_regression():
    from tests.reliability.helpers import BlackBoxLogp
    from tests.reliability.test_exactness import linear_regression

    x, y, sigma, tau, mean, cov = linear_regression()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, tau, shape=len(mean))
        pm.Potential("lik", BlackBoxLogp(lambda b: -0.5 * np.sum((y - x @ b) ** 2) / sigma**2,
                                         "regression")(beta))
    return model, mean, np.sqrt(np.diag(cov))


def test_a_black_box_domain_is_widened_toward_the_posteriors_scale():
    # The black-box probe's covariance was capped by a short random walk's spread: the box
    # had sd 0.089-0.114 for a coefficient whose posterior sd is 0.24 (0.37-0.47 of it).
    # The box from the warm-up's evaluations near the lowest potential covers their spread.
    model, mean, sd = _black_box_regression()
    with model:
        step = SparseGridHMC(rng=0, **QUIET)
        pm.sample(draws=10, tune=400, step=step, random_seed=1, **SAMPLE)
    assert np.sqrt(step.box_cov_[0, 0]) > 0.55 * sd[0]


@pytest.mark.shared_between_generations
def test_a_black_box_conjugate_regression_is_recovered():
    # Before the continuous continuation, the box covering the exploration's spread and the
    # exploration share outside the box: on PyMC 6 at this seed half the draws lay outside
    # the box and beta[0]'s sd came out 0.336 against 0.241. Passes on both generations.
    model, mean, sd = _black_box_regression()
    with model:
        step = SparseGridHMC(rng=0, **QUIET)
        idata = pm.sample(draws=1000, tune=800, step=step, random_seed=1,
                          **{**SAMPLE, "chains": 2})
    _assert_moments(_draws(idata, "beta"), mean, sd)


def test_a_cheap_grid_prints_no_progress_bar_by_default(capsys, monkeypatch):
    # progressbar="auto": shown only when the grid would take over PARALLEL_AFTER seconds
    from pymc_surrogate.step_methods.evaluation import batch as batch_evaluation

    shown = []
    real = batch_evaluation._Progress
    monkeypatch.setattr(batch_evaluation, "_Progress",
                        lambda show, *a: shown.append(show) or real(show, *a))
    with gaussian_model(MEAN, COV):
        SparseGridHMC(domain=GridBox(mean=MEAN, cov=COV), surrogate=NaiveGrid(max_nodes=60), executor="serial", rng=1).precompute()
        monkeypatch.setattr(batch_evaluation, "PARALLEL_AFTER", 0.0)  # "an expensive model"
        SparseGridHMC(domain=GridBox(mean=MEAN, cov=COV), surrogate=NaiveGrid(max_nodes=60), executor="serial", rng=1).precompute()
    assert shown == [False, True]


def _grid_potentials(potential, mean, cov, dim):
    from pymc_surrogate.surrogates.box import principal_box
    from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid

    domain, transform = principal_box(mean, cov, 3.0)
    grid = (NaiveGrid(points_per_dim="auto", max_nodes=1000, transform=transform) if dim <= 2
            else SmolyakGrid(level="auto", max_nodes=1000, transform=transform))
    nodes = grid.design(domain)
    return grid, np.array([potential(q) for q in nodes])


def test_a_black_box_warm_up_box_is_refitted_to_its_grids_nodes():
    # The black-box elliptic PDE, d = 20: the warm-up's random walk gave sds 0.58-0.96 of
    # the posterior's and a box holding 39% of its mass (R-hat 1.38). A narrow, off-centre
    # box on a correlated 12-d Gaussian: its nodes' Laplace approximation gives the
    # Gaussian's own +-3 sd box; a box that fits is kept; the banana's nodes fit no quadratic.
    dim = 12
    rng = np.random.default_rng(3)
    factor = rng.normal(size=(dim, dim)) / np.sqrt(dim) + np.eye(dim)
    cov, mean = factor @ factor.T, rng.normal(size=dim)
    precision = np.linalg.inv(cov)

    def gaussian(q):
        return 0.5 * (q - mean) @ precision @ (q - mean)

    narrow = 0.5 * cov
    grid, potentials = _grid_potentials(gaussian, mean + 0.3 * np.sqrt(np.diag(cov)), narrow, dim)
    refit = GridDomain(dim, 3.0, False).refitted(grid, potentials)
    assert refit is not None
    _domain, transform = refit
    np.testing.assert_allclose(transform.center, mean, atol=1e-6)
    np.testing.assert_allclose(transform.axes @ transform.axes.T, cov, rtol=1e-6, atol=1e-6)
    grid, potentials = _grid_potentials(gaussian, mean, cov, dim)
    assert GridDomain(dim, 3.0, False).refitted(grid, potentials) is None

    def banana(q):
        return 0.5 * q[0] ** 2 + 0.5 * ((q[1] - q[0] ** 2 + 1.0) / 0.3) ** 2

    grid, potentials = _grid_potentials(banana, np.array([0.0, 0.0]), np.diag([1.0, 2.0]), 2)
    assert GridDomain(2, 3.0, False).refitted(grid, potentials) is None


def test_after_set_data_the_grid_is_built_for_the_new_posterior():
    """The grid of the old data's posterior is dropped when the data change: the second
    run's box is centred on the new posterior (the old one stayed at the first's, 2 sd
    away from the new mean along each axis)."""
    with pm.Model() as model:
        y = pm.Data("y", np.zeros(5))
        mu = pm.Normal("mu", 0, 3, shape=2)
        pm.Normal("obs", mu.sum(), 1, observed=y)
        step = SparseGridHMC(use_gradient=False)
    for shift in (0.0, 4.0):
        with model:
            pm.set_data({"y": np.full(5, shift)})
            pm.sample(step=step, chains=1, tune=300, draws=50, random_seed=1,
                      progressbar=False, compute_convergence_checks=False)
        # the posterior of mu1 + mu2 has mean 5 shift / (5 + 1/18), the box its centre
        assert abs(step.box_mean_.sum() - shift * 5 / (5 + 1 / 18)) < 0.5, step.box_mean_

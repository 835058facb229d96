import numpy as np
import pytest
from scipy.stats import kurtosis

from pymc_surrogate.surrogates.triangular_map import TriangularMap


def banana(n, seed=0):
    rng = np.random.default_rng(seed)
    b2 = rng.standard_normal(n)
    return np.c_[1.0 - b2**2 + 0.2 * rng.standard_normal(n), b2]


def funnel(n, seed=0, dim=2):
    rng = np.random.default_rng(seed)
    v = 3.0 * rng.standard_normal(n)
    return np.c_[v, np.exp(v / 2)[:, None] * rng.standard_normal((n, dim - 1))]


def gaussian(n, dim, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dim, dim))
    return rng.standard_normal((n, dim)) @ (a + dim * np.eye(dim)).T + rng.normal(0, 3, dim)


def fitted(kind):
    states = {"banana": banana(800), "funnel": funnel(800),
              "funnel3": funnel(800, dim=3),
              "gauss": gaussian(800, 3)}[kind]
    return TriangularMap().fit(states), states


def jacobian(f, z, eps=1e-6):
    return np.array([(f(z + eps * e) - f(z - eps * e)) / (2 * eps) for e in np.eye(z.size)]).T


@pytest.mark.parametrize("kind", ["banana", "funnel", "funnel3", "gauss"])
def test_round_trip(kind):
    tmap, states = fitted(kind)
    z = tmap.inverse(states)
    np.testing.assert_allclose(tmap.forward(z), states, atol=1e-9, rtol=1e-9)
    np.testing.assert_allclose(tmap.inverse(tmap.forward(z[:5])), z[:5], atol=1e-9)
    # one point as well as rows
    np.testing.assert_allclose(tmap.forward(z[0]), states[0], atol=1e-9)
    # far outside the states too (the log-scale saturates there)
    far = 6.0 * np.random.default_rng(3).standard_normal((20, states.shape[1]))
    np.testing.assert_allclose(tmap.inverse(tmap.forward(far)), far, atol=1e-7)


@pytest.mark.parametrize("kind", ["banana", "funnel", "funnel3", "gauss"])
def test_log_det_against_finite_differences(kind):
    tmap, states = fitted(kind)
    z = tmap.inverse(states[:4])
    z = np.vstack([z, 5.0 * np.ones(states.shape[1])])  # and in the saturated region
    for point in z:
        sign, logdet = np.linalg.slogdet(jacobian(tmap.forward, point))
        assert sign != 0
        np.testing.assert_allclose(tmap.log_det_jacobian(point), logdet, atol=1e-6)


@pytest.mark.parametrize("kind", ["banana", "funnel", "funnel3"])
def test_gradients_against_finite_differences(kind):
    tmap, states = fitted(kind)
    dim = states.shape[1]
    rng = np.random.default_rng(4)
    prec = np.eye(dim) + 0.3 * np.ones((dim, dim))
    centre = rng.standard_normal(dim)

    def potential(q):
        return 0.5 * (q - centre) @ prec @ (q - centre)

    def potential_z(z):
        return potential(tmap.forward(z)) - tmap.log_det_jacobian(z)

    for q in states[:4]:
        z, u_z, g_z = tmap.pull_back(q[None], np.array([potential(q)]), (prec @ (q - centre))[None])
        np.testing.assert_allclose(u_z[0], potential_z(z[0]), atol=1e-9)
        fd = [(potential_z(z[0] + 1e-6 * e) - potential_z(z[0] - 1e-6 * e)) / 2e-6
              for e in np.eye(dim)]
        np.testing.assert_allclose(g_z[0], fd, rtol=1e-5, atol=1e-5)
        # push_forward undoes pull_back
        q_back, u_back, g_back = tmap.push_forward(z, u_z, g_z)
        np.testing.assert_allclose(q_back[0], q, atol=1e-9)
        np.testing.assert_allclose(u_back[0], potential(q), atol=1e-9)
        np.testing.assert_allclose(g_back[0], prec @ (q - centre), atol=1e-8)


@pytest.mark.parametrize("kind", ["banana", "funnel"])
def test_fitted_map_sends_the_posterior_close_to_a_standard_normal(kind):
    tmap, states = fitted(kind)
    fresh = banana(4000, seed=9) if kind == "banana" else funnel(4000, seed=9)
    z = tmap.inverse(fresh)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=0.1)
    np.testing.assert_allclose(z.std(0), 1.0, atol=0.1)
    np.testing.assert_allclose(kurtosis(z, axis=0), 0.0, atol=0.5)
    assert abs(np.corrcoef(z.T)[0, 1]) < 0.1
    assert abs(np.corrcoef(z[:, 0] ** 2, z[:, 1] ** 2)[0, 1]) < 0.1  # no scale left to vary
    # the affine frame leaves them far from it: a curved arm, a varying scale
    affine = TriangularMap(max_degree=0).fit(states).inverse(fresh)
    assert np.max(np.abs(kurtosis(affine, axis=0))) > 1.0
    assert not tmap.affine
    # the order: the banana's bent coordinate is a function of its straight one, the
    # funnel's scale comes first
    assert list(tmap.order_) == ([1, 0] if kind == "banana" else [0, 1])


@pytest.mark.parametrize("kind", ["banana", "funnel"])
def test_order_among_independent_coordinates(kind):
    """In 6 dimensions, a banana or funnel pair among four independent normals: the order
    search (scored without cross terms) still puts the bent coordinate after its straight
    one and the funnel's scale before its neck, and the map bends only that pair."""
    rng = np.random.default_rng(3)
    pair = banana(1500, seed=3) if kind == "banana" else funnel(1500, seed=3)
    states = np.column_stack([rng.standard_normal((1500, 2)), pair[:, 0],
                              rng.standard_normal((1500, 2)), pair[:, 1]])
    first, second = (5, 2) if kind == "banana" else (2, 5)
    tmap = TriangularMap().fit(states)
    order = list(tmap.order_)
    assert order.index(first) < order.index(second), order
    bent = {int(tmap.order_[k]) for k in np.flatnonzero(tmap.degrees_)}
    assert bent == {second}, (order, tmap.degrees_)


@pytest.mark.parametrize("dim", [2, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gaussian_states_choose_the_affine_frame(dim, seed):
    tmap = TriangularMap().fit(gaussian(600, dim, seed))
    assert tmap.affine, tmap.degrees_
    np.testing.assert_array_equal(tmap.held_out_gain_, 0.0)


def test_too_few_states_to_hold_out_keep_the_affine_frame():
    # 30 states: 9 held out, fewer than a degree can be judged on
    tmap = TriangularMap().fit(banana(30, seed=5))
    assert tmap.affine
    assert not TriangularMap().fit(banana(200, seed=5)).affine


def test_degree_zero_is_the_affine_frame():
    states = gaussian(500, 3)
    tmap = TriangularMap(max_degree=0).fit(states)
    z = tmap.inverse(states)
    np.testing.assert_allclose(np.cov(z, rowvar=False), np.eye(3), atol=0.02)
    # a constant Jacobian: log|det| is the same everywhere
    logdet = tmap.log_det_jacobian(z[:10])
    np.testing.assert_allclose(logdet, logdet[0], atol=1e-12)


def test_bad_settings():
    with pytest.raises(ValueError, match="max_degree"):
        TriangularMap(max_degree=3).fit(gaussian(100, 2))
    with pytest.raises(ValueError, match="permutation"):
        TriangularMap(order=[0, 0]).fit(gaussian(100, 2))


@pytest.mark.parametrize("kind", ["banana", "gauss"])
def test_rows_without_a_gradient_stay_nan_and_leave_the_others_alone(kind):
    # a training set mixes evaluations with and without a gradient (NaN rows)
    tmap, states = fitted(kind)
    assert tmap.whitening_.chol.ndim == 2  # the dense solve, which checked for NaN
    dim = states.shape[1]
    z = tmap.inverse(states[:6])
    grads = np.random.default_rng(5).standard_normal((6, dim))
    grads[[1, 4]] = np.nan
    for convert in (tmap.push_forward, tmap.pull_back):
        points = z if convert == tmap.push_forward else states[:6]
        out = convert(points, np.zeros(6), grads)[2]
        assert np.all(np.isnan(out[[1, 4]]))
        for i in (0, 2, 3, 5):
            np.testing.assert_allclose(out[i], convert(points[i:i + 1], np.zeros(1),
                                                       grads[i:i + 1])[2][0], rtol=1e-12)

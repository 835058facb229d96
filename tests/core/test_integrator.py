import numpy as np
import pytest

from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag, QuadPotentialFull

from pymc_surrogate.core.integrator import leapfrog


def banana_field(q):
    u = 0.5 * q[0] ** 2 + 0.5 * (q[1] - q[0] ** 2) ** 2 / 0.25
    g = np.array([q[0] - 2 * q[0] * (q[1] - q[0] ** 2) / 0.25, (q[1] - q[0] ** 2) / 0.25])
    return u, g


METRICS = [
    QuadPotentialDiag(np.array([0.7, 1.3]), rng=0),
    QuadPotentialFull(np.array([[1.0, 0.3], [0.3, 0.5]]), rng=0),
]


def run(q, p, steps=17, eps=0.05, metric=METRICS[0]):
    u, g = banana_field(q)
    return leapfrog(q, p, u, g, banana_field, metric, eps, steps)


@pytest.mark.parametrize("metric", METRICS)
def test_reversible(metric):
    q0, p0 = np.array([0.3, -0.2]), np.array([0.5, 1.1])
    end = run(q0, p0, metric=metric)
    back = run(end.q, -end.p, metric=metric)
    np.testing.assert_allclose(back.q, q0, atol=1e-10)
    np.testing.assert_allclose(-back.p, p0, atol=1e-10)


@pytest.mark.parametrize("metric", METRICS)
def test_volume_preserving(metric):
    z0 = np.array([0.3, -0.2, 0.5, 1.1])
    h = 1e-6
    jac = np.empty((4, 4))
    for j in range(4):
        zp, zm = z0.copy(), z0.copy()
        zp[j] += h
        zm[j] -= h
        ep, em = run(zp[:2], zp[2:], metric=metric), run(zm[:2], zm[2:], metric=metric)
        jac[:, j] = (np.concatenate([ep.q, ep.p]) - np.concatenate([em.q, em.p])) / (2 * h)
    assert np.linalg.det(jac) == pytest.approx(1.0, abs=1e-6)


def test_energy_error_is_second_order():
    q0, p0 = np.array([0.3, -0.2]), np.array([0.5, 1.1])
    metric = METRICS[0]
    h0 = banana_field(q0)[0] + metric.energy(p0)
    errors = []
    for eps in (0.02, 0.01):
        end = run(q0, p0, steps=int(round(0.4 / eps)), eps=eps)
        errors.append(abs(end.potential + metric.energy(end.p) - h0))
    assert errors[0] / errors[1] == pytest.approx(4.0, rel=0.3)


def test_non_finite_field_stops_the_trajectory():
    def field(q):
        return (np.nan, q) if q[0] > 0.5 else (0.5 * q @ q, q)

    end = leapfrog(np.zeros(2), np.array([1.0, 0.0]), 0.0, np.zeros(2), field, METRICS[0], 0.2, 50)
    assert not end.finite and end.n_steps < 50


def test_energy_range_is_symmetric_in_direction():
    q0, p0 = np.array([0.3, -0.2]), np.array([0.5, 1.1])
    end = run(q0, p0)
    back = run(end.q, -end.p)
    assert back.energy_range == pytest.approx(end.energy_range, rel=1e-8)

import numpy as np

from pymc_surrogate.surrogates.ridge import (
    NormalEquations,
    solve_partially_penalised_ridge,
    solve_ridge,
)


def test_matches_the_normal_equations_for_a_fixed_penalty():
    rng = np.random.default_rng(0)
    free, pen = rng.standard_normal((200, 3)), rng.standard_normal((200, 7))
    y = rng.standard_normal(200) + 1e5  # a huge offset carried by the free block only
    free[:, 0] = 1.0
    alpha = 2.5
    sol = solve_partially_penalised_ridge(free, pen, y, alpha=alpha)
    design = np.hstack([free, pen])
    # The penalty acts on weights of unit-norm columns.
    penalty = np.diag([0.0] * 3 + list(alpha * np.linalg.norm(pen, axis=0) ** 2))
    direct = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    np.testing.assert_allclose(np.concatenate([sol.free, sol.penalised]), direct, rtol=1e-7)


def test_gcv_prefers_little_penalty_for_noiseless_data_and_more_for_noise():
    rng = np.random.default_rng(1)
    free = np.ones((300, 1))
    pen = rng.standard_normal((300, 40))
    truth = pen[:, :3] @ [1.0, -2.0, 0.5]
    exact = solve_partially_penalised_ridge(free, pen, truth)
    noisy = solve_partially_penalised_ridge(free, pen, truth + 3.0 * rng.standard_normal(300))
    assert exact.alpha < noisy.alpha


def test_the_penalty_floor_bounds_what_gcv_may_choose():
    rng = np.random.default_rng(2)
    design = np.hstack([np.ones((300, 1)), rng.standard_normal((300, 40))])
    equations = NormalEquations.from_design(design, design[:, 1:4] @ [1.0, -2.0, 0.5])
    # Noise-free data: cross-validation takes the smallest penalty offered, the floor.
    low, high = (solve_ridge(equations, 1, min_alpha=m).alpha for m in (1e-9, 1e-3))
    assert np.isclose(high / low, 1e6, rtol=1e-9)

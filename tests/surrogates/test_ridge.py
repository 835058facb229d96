import numpy as np

from pymc_surrogate.surrogates.ridge import solve_partially_penalised_ridge


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

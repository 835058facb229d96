"""``benchmarks/rmhmc_table1.py`` (issue 35, rns-hmc Table 1): the exact RMHMC fields'
derivatives against finite differences, and a smoke run of the table so that it cannot rot
(tiny chains: what it writes, not whether the runs are right)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import rmhmc_table1 as table1
from pymc_surrogate.surrogates.third_derivatives import RankOneCubes


def _dense(third, dim: int) -> np.ndarray:
    """``third[i] = dH/dq_i`` as a dense array, whatever its parts."""
    total = np.zeros((dim, dim, dim))
    for part in third if isinstance(third, list | tuple) else [third]:
        if isinstance(part, RankOneCubes):
            total += np.einsum("s,si,sj,sk->ijk", part.coef, part.vectors, part.vectors,
                               part.vectors)
        else:
            total += part
    return total


def _errors(field, q: np.ndarray, h: float = 1e-5) -> tuple[float, float]:
    """Relative max errors of the gradient and of ``dH/dq`` against central differences."""
    _, grad, _, third = field(q)
    third = _dense(third, q.size)
    steps = h * np.eye(q.size)
    fd_grad = np.array([(field(q + e)[0] - field(q - e)[0]) / (2 * h) for e in steps])
    fd_third = np.array([(field(q + e)[2] - field(q - e)[2]) / (2 * h) for e in steps])
    return (float(np.abs(grad - fd_grad).max() / np.abs(fd_grad).max()),
            float(np.abs(third - fd_third).max() / np.abs(fd_third).max()))


@pytest.fixture(scope="module", params=table1.PROBLEMS)
def problem(request):
    return table1.make_problem(request.param, "smoke")


def _point(problem, scale: float = 0.3, seed: int = 1) -> np.ndarray:
    dim = problem.model.initial_point()[problem.var].size
    return scale * np.random.default_rng(seed).standard_normal(dim)


def test_exact_fields_derivatives_match_finite_differences(problem):
    grad_err, third_err = _errors(problem.field, _point(problem))
    assert grad_err < 1e-6 and third_err < 1e-6


def test_exact_field_potential_is_the_models_negative_logp(problem):
    logp = problem.model.compile_logp()
    point = problem.model.initial_point()
    gaps = []
    for seed in (1, 2):
        q = _point(problem, 0.5, seed)
        gaps.append(-problem.field(q)[0] - float(logp({**point, problem.var: q})))
    assert gaps[0] == pytest.approx(gaps[1], abs=1e-8)  # equal up to the normalising constant


def test_a_wrong_sign_in_the_third_derivative_fails_the_check():
    problem = table1.make_problem("logistic", "smoke")

    def flipped(q):
        u, g, h, third = problem.field(q)
        return u, g, h, [part.scaled(-1.0) for part in third]

    assert _errors(flipped, _point(problem))[1] > 0.5


def test_pde_sensitivities_match_the_models_jacobian_and_differences():
    problem = table1.make_problem("pde", "smoke")
    field, q = problem.field, _point(problem)
    u_obs, jac, hess = field.sensitivities(q)
    assert np.allclose(u_obs, problem.info.problem.forward(q), rtol=1e-12, atol=1e-12)
    assert np.allclose(jac, problem.info.problem.jacobian(q), rtol=1e-10, atol=1e-12)
    h = 1e-5
    fd = np.stack([(field.sensitivities(q + e)[1] - field.sensitivities(q - e)[1]) / (2 * h)
                   for e in h * np.eye(q.size)], axis=1)  # (n_obs, k, l): dJ[:, l]/dt_k
    assert np.abs(hess - fd).max() < 1e-6 * np.abs(fd).max()


def test_the_table_is_written(tmp_path):
    rows = table1.main(["--size", "smoke", "--tune", "20", "--draws", "20", "--out",
                        str(tmp_path), "--tag", "smoke"])
    frame = pd.read_csv(tmp_path / "rmhmc_table1_smoke.csv")
    assert list(frame["run"]) == list(table1.RUNS) * 2
    assert (frame["status"] == "ok").all(), frame.get("error")
    assert (frame["n_evals"] > 0).all() and (frame["ess_min"] > 0).all()
    assert np.allclose(frame.loc[frame["run"] == "RMHMC", "vs_rmhmc"], 1.0)
    assert {"speedup", "mean_vs_nuts", "s_per_iter", "ess_s_total"} <= set(frame)
    text = (tmp_path / "rmhmc_table1_smoke.md").read_text()
    assert "| problem | run |" in text and "target >= 10x" in text
    assert len(rows) == 8

"""Grid surrogates of SparseGridHMC (sparse-grid-hmc §3.3-3.5, App. B).

Measured convergence (max error at 4000 uniform points of the domain; the tests below
check the rates with margins):

- quadratic in d = 2 on [-3, 3]^2: NaiveGrid with 25, 81, 289, 1089, 4225 nodes (5-65
  points a dimension) 0.35, 0.088, 0.022, 0.0055, 0.0014: x 1/4 per halving of h, O(h^2)
  = O(N^-1). SmolyakGrid levels 2-7 (13, 29, 65, 145, 321, 705 nodes) 0.35, 0.088, 0.022,
  0.0055, 0.0014, 0.00034: the full grid's error with 321 nodes instead of 4225.
- banana in d = 2 on [-3, 3] x [-4, 2]: Naive (25-4225 nodes) 5.2, 1.7, 0.48, 0.13, 0.033;
  Smolyak levels 1-7 (5-705 nodes) 26.8, 8.7, 2.6, 0.70, 0.18, 0.046, 0.011: x 1/3.1 to
  1/4 per level, about N^-1.7 in the node count.
- correlated Gaussian in d = 4 on [-3, 3]^4: Smolyak levels 1-6 (9, 41, 137, 401, 1105,
  2929 nodes) 4.5, 0.73, 0.18, 0.046, 0.011, 0.0029: x 1/4 per level, about N^-1.3.
"""

import numpy as np
import pytest

import pymc_surrogate.surrogates.grid_base as grid_base
import pymc_surrogate.surrogates.smolyak_grid as smolyak_grid
from pymc_surrogate.surrogates.base import DesignedSurrogate, Domain
from pymc_surrogate.surrogates.sparse_grid import (
    BoxTransform,
    NaiveGrid,
    SmolyakGrid,
    principal_box,
    smolyak_node_count,
)

# Nodes of the Clenshaw-Curtis-type sparse grid (1-d levels of 1, 3, 5, 9, 17, ... nodes,
# nested) for levels 0-7: J. Burkardt, "Counting points in sparse grids" (sgmga_counting,
# p. 5) and his SPARSE_GRID_CC data sets (d = 2: 1, 5, 13, 29, 65, 145, 321, 705). The
# formula: N = sum_{|l| <= n} prod_k m(l_k), m(0) = 1, m(1) = 2, m(l) = 2^(l-1).
KNOWN_COUNTS = {
    1: [1, 3, 5, 9, 17, 33, 65, 129],
    2: [1, 5, 13, 29, 65, 145, 321, 705],
    5: [1, 11, 61, 241, 801, 2433, 6993, 19313],
    10: [1, 21, 221, 1581, 8801, 41265, 171425, 652065],
}


BANANA_BOX = Domain(np.array([-3.0, -4.0]), np.array([3.0, 2.0]))


def box(d, half=3.0):
    return Domain(-half * np.ones(d), half * np.ones(d))


def quadratic(x):
    return 0.5 * (x[..., 0] ** 2 + x[..., 1] ** 2 / 4 + 0.6 * x[..., 0] * x[..., 1])


def banana(x):
    return x[..., 0] ** 2 / 8 + (x[..., 1] + 0.5 * x[..., 0] ** 2 - 1.0) ** 2


def gaussian4(x):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    prec = np.linalg.inv(a @ a.T / 4 + np.eye(4))
    z = x - np.array([0.3, -0.2, 0.1, 0.0])
    return 0.5 * np.einsum("...i,ij,...j->...", z, prec, z)


def fitted(grid, f, domain):
    nodes = grid.design(domain)
    return grid.fit(nodes, f(nodes))


def max_error(grid, f, domain, n=4000, seed=1):
    points = np.random.default_rng(seed).uniform(domain.lower, domain.upper, (n, domain.lower.size))
    return float(np.max(np.abs(grid.predict(points) - f(points))))


# -- node sets -------------------------------------------------------------------------
@pytest.mark.parametrize("dim", sorted(KNOWN_COUNTS))
def test_node_counts_match_the_known_smolyak_counts(dim):
    assert [smolyak_node_count(dim, n) for n in range(8)] == KNOWN_COUNTS[dim]
    for level, count in enumerate(KNOWN_COUNTS[dim]):
        if count > 2000:
            break
        nodes = SmolyakGrid(level, max_nodes=2000).design(box(dim))
        assert nodes.shape == (count, dim)
        assert np.unique(nodes, axis=0).shape[0] == count


def test_nodes_are_nested_across_levels_in_design_order():
    previous = np.zeros((0, 3))
    for level in range(6):
        nodes = SmolyakGrid(level, max_nodes=10_000).design(box(3))
        np.testing.assert_array_equal(nodes[: previous.shape[0]], previous)
        previous = nodes


def test_one_dimensional_nodes_are_app_b_equidistant_sets():
    # App. B: x_j = (j - 1) / (m_i - 1), m_1 = 1 (the centre), m_i = 2^(i-1) + 1.
    nodes = SmolyakGrid(3, max_nodes=100).design(Domain(np.zeros(1), np.ones(1)))[:, 0]
    np.testing.assert_array_equal(np.sort(nodes), np.linspace(0.0, 1.0, 9))
    np.testing.assert_array_equal(nodes[:3], [0.5, 0.0, 1.0])


def test_auto_level_is_the_largest_within_budget():
    grid = SmolyakGrid(max_nodes=5000)
    grid.design(box(5))
    assert grid.level_ == 5 and grid.n_nodes_ == 2433  # level 6 has 6993
    naive = NaiveGrid(max_nodes=500)
    naive.design(box(2))
    assert naive.shape_ == (22, 22)


# -- interpolation ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "grid, dim",
    [(NaiveGrid(7), 2), (NaiveGrid((4, 5, 6)), 3), (SmolyakGrid(4), 3), (SmolyakGrid(5), 1)],
)
def test_interpolates_the_nodes(grid, dim):
    domain = Domain(-np.arange(1, dim + 1.0), np.ones(dim) * 2)
    f = lambda x: np.sin(x).sum(-1) + np.prod(x, axis=-1)
    grid = fitted(grid, f, domain)
    nodes = grid.nodes_
    np.testing.assert_allclose(grid.predict(nodes), f(nodes), atol=1e-12)
    np.testing.assert_allclose(grid.value_and_grad(nodes[7])[0], f(nodes[7]), atol=1e-12)


def test_level_zero_is_a_constant_and_high_dimension_works():
    grid = fitted(SmolyakGrid(0), gaussian4, box(4))
    value, grad = grid.value_and_grad(np.ones(4))
    assert value == pytest.approx(gaussian4(np.zeros(4))) and np.all(grad == 0.0)
    # d = 10, level 3: 1581 nodes, 286 terms an evaluation.
    f = lambda x: np.sum(np.cos(x), axis=-1) + x[..., 0] * x[..., 9]
    grid = fitted(SmolyakGrid(3), f, box(10, half=1.0))
    assert grid.n_nodes_ == 1581
    np.testing.assert_allclose(grid.predict(grid.nodes_), f(grid.nodes_), atol=1e-12)
    q = np.linspace(-0.77, 0.81, 10)
    value, grad = grid.value_and_grad(q)
    steps = 1e-6 * np.eye(10)
    fd = (grid.predict(q + steps) - grid.predict(q - steps)) / 2e-6
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    assert abs(value - f(q)) < 0.05


def test_smolyak_reproduces_its_span_exactly():
    # Level 1 holds the affine functions, level 2 also every product of two coordinates.
    rng = np.random.default_rng(0)
    points = rng.uniform(-3, 3, (200, 4))
    affine = lambda x: 1.0 + x @ np.array([1.0, -2.0, 0.5, 3.0])
    bilinear = lambda x: affine(x) + 2.0 * x[..., 0] * x[..., 3] - x[..., 1] * x[..., 2]
    grid = fitted(SmolyakGrid(1), affine, box(4))
    np.testing.assert_allclose(grid.predict(points), affine(points))
    grid = fitted(SmolyakGrid(2), bilinear, box(4))
    np.testing.assert_allclose(grid.predict(points), bilinear(points), atol=1e-12)
    value, grad = grid.value_and_grad(points[0])
    x = points[0]
    expected = np.array([1 + 2 * x[3], -2 - x[2], 0.5 - x[1], 3 + 2 * x[0]])
    np.testing.assert_allclose(grad, expected, atol=1e-12)


@pytest.mark.parametrize("f, domain", [(quadratic, box(2)), (banana, BANANA_BOX)])
def test_naive_grid_error_falls_as_h_squared(f, domain):
    errors = [max_error(fitted(NaiveGrid(p, max_nodes=5000), f, domain), f, domain)
        for p in (9, 17, 33, 65)]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(ratios > 3.3), errors  # measured 3.5-4.0: O(h^2)
    assert errors[-1] < (0.002 if f is quadratic else 0.04)


@pytest.mark.parametrize(
    "f, domain, levels, last",
    [
        (quadratic, box(2), range(2, 8), 4e-4),
        (banana, BANANA_BOX, range(2, 8), 0.015),
        (gaussian4, box(4), range(2, 6), 0.015),
    ],
)
def test_smolyak_error_falls_by_about_four_per_level(f, domain, levels, last):
    errors = [
        max_error(fitted(SmolyakGrid(n, max_nodes=5000), f, domain), f, domain) for n in levels
    ]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(ratios > 3.0), errors  # measured 3.4-4.0
    assert errors[-1] < last, errors


def test_sparse_grid_beats_the_full_grid_per_node():
    domain = BANANA_BOX
    smolyak = fitted(SmolyakGrid(7), banana, domain)  # 705 nodes
    naive = fitted(NaiveGrid(27), banana, domain)  # 729 nodes
    assert max_error(smolyak, banana, domain) < 0.5 * max_error(naive, banana, domain)


def test_surplus_by_level_estimates_a_falling_error():
    grid = fitted(SmolyakGrid(7), banana, BANANA_BOX)
    top = grid.surplus_by_level_
    assert top.shape == (8,)
    assert np.all(top[3:] < 0.5 * top[2:-1]), top


# -- gradients -------------------------------------------------------------------------
def inside_cells(grid, points, spacing):
    """Points at least 1e-4 of a cell from every face of the finest grid (in unit
    coordinates), where the interpolant is one multilinear polynomial."""
    x = grid._to_unit(points) / spacing
    frac = x - np.floor(x)
    return points[np.all(np.minimum(frac, 1 - frac) > 1e-4, axis=1)]


@pytest.mark.parametrize("rotated", [False, True])
@pytest.mark.parametrize("kind", ["naive", "smolyak"])
def test_gradient_is_the_interpolants_derivative_inside_a_cell(kind, rotated):
    dim = 3
    rng = np.random.default_rng(2)
    if rotated:
        a = rng.standard_normal((dim, dim))
        domain, transform = principal_box(np.array([1.0, -1.0, 0.5]), a @ a.T + np.eye(dim), k=2.5)
    else:
        domain, transform = Domain(np.array([-2.0, -1.0, 0.0]), np.array([1.0, 3.0, 2.0])), None
    f = lambda x: np.sin(x).sum(-1) + 0.2 * np.prod(x, axis=-1) + 0.1 * np.sum(x**2, -1)
    if kind == "naive":
        grid, spacing = NaiveGrid(9, transform=transform), 1.0 / 8
    else:
        grid, spacing = SmolyakGrid(4, transform=transform), 1.0 / 16
    grid = fitted(grid, f, domain)
    u = rng.uniform(domain.lower, domain.upper, (40, dim))
    points = inside_cells(grid, u if transform is None else transform.from_box(u), spacing)
    assert points.shape[0] >= 20
    eps = 1e-6
    for q in points:
        value, grad = grid.value_and_grad(q)
        assert isinstance(value, float) and grad.shape == (dim,)
        fd = [
            (grid.value_and_grad(q + eps * e)[0] - grid.value_and_grad(q - eps * e)[0]) / (2 * eps)
            for e in np.eye(dim)
        ]
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
    values, grads = grid.value_and_grad_many(points)
    singles = [grid.value_and_grad(q) for q in points]
    np.testing.assert_allclose(values, [v for v, _ in singles], rtol=1e-14, atol=1e-13)
    np.testing.assert_allclose(grads, [g for _, g in singles], rtol=1e-13, atol=1e-12)


def test_gradient_approximates_the_true_gradient():
    grid = fitted(SmolyakGrid(6, max_nodes=5000), gaussian4, box(4))
    rng = np.random.default_rng(3)
    points = rng.uniform(-2, 2, (200, 4))
    _, grads = grid.value_and_grad_many(points)
    a = np.random.default_rng(0).standard_normal((4, 4))
    prec = np.linalg.inv(a @ a.T / 4 + np.eye(4))
    true = (points - np.array([0.3, -0.2, 0.1, 0.0])) @ prec
    # Piecewise-linear U: the force is first order, O(h) = 6 / 64 here.
    assert np.max(np.abs(grads - true)) < 0.3 * np.max(np.abs(true))
    assert np.sqrt(np.mean((grads - true) ** 2)) < 0.05 * np.sqrt(np.mean(true**2))


def test_chunks_and_the_sparse_node_map_change_nothing(monkeypatch):
    grid = fitted(SmolyakGrid(4), gaussian4, box(4))
    points = np.random.default_rng(4).uniform(-3, 3, (50, 4))
    expected = grid.value_and_grad_many(points)
    monkeypatch.setattr(grid_base, "_CHUNK_ELEMENTS", 1000)
    chunked = grid.value_and_grad_many(points)
    np.testing.assert_array_equal(chunked[0], expected[0])
    np.testing.assert_array_equal(chunked[1], expected[1])
    # The stride matrix is sparse in high dimension: same nodes, same interpolant.
    monkeypatch.setattr(smolyak_grid, "_DENSE_NODE_MAP", 0)
    sparse = fitted(SmolyakGrid(4), gaussian4, box(4))
    assert not isinstance(sparse._node_map, np.ndarray)
    for a, b in zip(sparse.value_and_grad_many(points), expected):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("grid", [NaiveGrid(11), SmolyakGrid(5)])
def test_outside_the_box_the_boundary_cells_continue_linearly(grid):
    grid = fitted(grid, banana, box(2))
    face = np.array([3.0, 0.7])
    assert grid.contains(face) and not grid.contains(face + [1e-6, 0.0])
    # Continuous across the face, and straight beyond it (the boundary cell's polynomial).
    inside, _ = grid.value_and_grad(face - [1e-9, 0.0])
    outside, slope = grid.value_and_grad(face + [0.5, 0.0])
    further, _ = grid.value_and_grad(face + [1.0, 0.0])
    assert abs(grid.value_and_grad(face + [1e-9, 0.0])[0] - inside) < 1e-7
    np.testing.assert_allclose(further - outside, 0.5 * slope[0], rtol=1e-10)
    assert np.isfinite(grid.value_and_grad(np.array([40.0, -50.0]))[0])


# -- rotation --------------------------------------------------------------------------
def test_principal_box_round_trips_and_spans_the_covariance():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 3))
    cov = a @ a.T + 0.1 * np.eye(3)
    mean = np.array([1.0, 2.0, -1.0])
    domain, transform = principal_box(mean, cov, k=2.0)
    np.testing.assert_array_equal(domain.lower, -2.0 * np.ones(3))
    np.testing.assert_allclose(transform.axes @ transform.axes.T, cov, atol=1e-12)
    q = rng.standard_normal((10, 3))
    np.testing.assert_allclose(transform.from_box(transform.to_box(q)), q, atol=1e-12)
    # The box coordinates whiten N(mean, cov).
    draws = rng.multivariate_normal(mean, cov, size=20_000)
    np.testing.assert_allclose(np.cov(transform.to_box(draws), rowvar=False), np.eye(3), atol=0.05)
    # Chain rule: dU/dq = axes^-T dU/du, checked on U(q) = w . to_box(q).
    w = np.array([0.3, -1.0, 2.0])
    fd = [
        (w @ transform.to_box(mean + 1e-6 * e) - w @ transform.to_box(mean - 1e-6 * e)) / 2e-6
        for e in np.eye(3)
    ]
    np.testing.assert_allclose(transform.gradient_from_box(w), fd, rtol=1e-6)


def test_rotated_grid_nodes_contains_and_accuracy():
    cov = np.array([[1.0, 0.95], [0.95, 1.0]])
    mean = np.array([0.5, -0.5])
    prec = np.linalg.inv(cov)
    f = lambda x: 0.5 * np.einsum("...i,ij,...j->...", x - mean, prec, x - mean)
    domain, transform = principal_box(mean, cov, k=3.0)
    rotated = fitted(SmolyakGrid(5, transform=transform), f, domain)
    # Nodes are center + axes @ u for u in the box, and all are contained.
    u = transform.to_box(rotated.nodes_)
    assert np.all(u >= -3 - 1e-12) and np.all(u <= 3 + 1e-12)
    assert all(rotated.contains(q) for q in rotated.nodes_)
    assert not rotated.contains(mean + 3.2 * transform.axes[:, 0])
    assert rotated.contains(mean + 2.9 * transform.axes[:, 0])
    assert not rotated.contains(mean + 3.2 * np.sqrt(np.diag(cov)) * np.array([1.0, -1.0]))
    # At posterior draws the rotated box (a thin diagonal strip) is far more accurate than
    # the axis-aligned box of +-3 marginal sd with the same nodes.
    aligned = fitted(SmolyakGrid(5), f, Domain(mean - 3.0, mean + 3.0))
    draws = np.random.default_rng(6).multivariate_normal(mean, cov, size=2000)
    err_rotated = np.max(np.abs(rotated.predict(draws) - f(draws)))
    err_aligned = np.max(np.abs(aligned.predict(draws) - f(draws)))
    assert err_rotated < 0.2 * err_aligned, (err_rotated, err_aligned)


# -- persistence -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", [NaiveGrid, SmolyakGrid])
@pytest.mark.parametrize("rotated", [False, True])
def test_save_load_round_trip(tmp_path, kind, rotated):
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    domain, transform = principal_box(np.array([0.1, 0.2]), cov) if rotated else (box(2), None)
    grid = fitted(kind(max_nodes=300, transform=transform), banana, domain)
    path = grid.save(tmp_path / "grid")
    assert path.endswith(".npz")
    loaded = kind.load(path)
    assert type(loaded) is kind and loaded.n_nodes_ == grid.n_nodes_
    np.testing.assert_array_equal(loaded.nodes_, grid.nodes_)
    points = np.random.default_rng(7).uniform(-4, 4, (100, 2))
    for a, b in zip(loaded.value_and_grad_many(points), grid.value_and_grad_many(points)):
        np.testing.assert_array_equal(a, b)
    value, grad = loaded.value_and_grad(points[0])
    assert value == grid.value_and_grad(points[0])[0]
    other = SmolyakGrid if kind is NaiveGrid else NaiveGrid
    with pytest.raises(ValueError, match=f"holds a {kind.__name__}"):
        other.load(path)


# -- protocol and bad input ------------------------------------------------------------
def test_follows_the_designed_surrogate_protocol():
    for grid in (NaiveGrid(), SmolyakGrid()):
        assert isinstance(grid, DesignedSurrogate)
        assert grid.has_level


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SmolyakGrid(level=-1), "non-negative integer"),
        (lambda: SmolyakGrid(level=1.5), "non-negative integer"),
        (lambda: SmolyakGrid(level="max"), "non-negative integer"),
        (lambda: SmolyakGrid(max_nodes=0), "positive integer"),
        (lambda: NaiveGrid(points_per_dim=1), "at least 2|>= 2"),
        (lambda: NaiveGrid(points_per_dim=(5, 1)), ">= 2"),
        (lambda: NaiveGrid(points_per_dim=2.5), ">= 2"),
        (lambda: SmolyakGrid(transform=np.eye(2)), "BoxTransform"),
        (lambda: BoxTransform(np.zeros(2), np.ones((2, 2))), "invertible"),
        (lambda: BoxTransform(np.zeros(2), np.eye(3)), "shape"),
        (lambda: principal_box(np.zeros(2), np.eye(2), k=0.0), "positive"),
        (lambda: principal_box(np.zeros(2), np.zeros((2, 2))), "positive eigenvalue"),
        (lambda: principal_box(np.zeros(2), np.full((2, 2), np.nan)), "finite"),
    ],
)
def test_bad_settings_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "grid, domain, match",
    [
        (NaiveGrid(3), box(4), "d <= 3.*use SmolyakGrid"),
        (NaiveGrid(), box(4), "use SmolyakGrid"),
        (SmolyakGrid(max_nodes=6), box(3), "too small for level 1.*7 nodes"),
        (SmolyakGrid(level=6, max_nodes=5000), box(5), "6993 nodes.*max_nodes=5000"),
        (NaiveGrid(30, max_nodes=500), box(2), "900 nodes"),
        (NaiveGrid(max_nodes=3), box(2), "too small"),
        (NaiveGrid((3, 4)), box(3), "3 entries|2 entries"),
        (SmolyakGrid(), Domain(np.zeros(2), np.array([1.0, 0.0])), "dimension 1"),
        (SmolyakGrid(), Domain(np.zeros(2), np.array([1.0, np.inf])), "finite"),
        (SmolyakGrid(transform=BoxTransform(np.zeros(3), np.eye(3))), box(2), "transform"),
    ],
)
def test_bad_designs_raise(grid, domain, match):
    with pytest.raises(ValueError, match=match):
        grid.design(domain)


def test_fit_checks_the_nodes_and_their_values():
    grid = SmolyakGrid(3)
    with pytest.raises(ValueError, match="design"):
        grid.fit(np.zeros((5, 2)), np.zeros(5))
    nodes = grid.design(box(2))
    with pytest.raises(ValueError, match="not fitted"):
        grid.value_and_grad(np.zeros(2))
    with pytest.raises(ValueError, match="29 design nodes"):
        grid.fit(nodes[:-1], banana(nodes[:-1]))
    swapped = nodes.copy()
    swapped[[3, 4]] = swapped[[4, 3]]
    with pytest.raises(ValueError, match="row 3 is"):
        grid.fit(swapped, banana(swapped))
    with pytest.raises(ValueError, match="potentials"):
        grid.fit(nodes)
    values = banana(nodes)
    values[[5, 9]] = [np.inf, np.nan]
    with pytest.raises(ValueError, match=r"2 of 29 potentials.*node 5, q = \[" ):
        grid.fit(nodes, values)
    # Rounding of the nodes is tolerated; the fit then works.
    grid.fit(nodes * (1 + 1e-14), banana(nodes))
    with pytest.raises(ValueError, match="2 entries"):
        grid.value_and_grad(np.zeros(3))


@pytest.mark.parametrize("scale", [1e4, 1e6])
def test_principal_box_of_badly_scaled_coordinates(scale):
    """sds ``scale`` and ``1 / scale``: the box is ``+-k`` of each coordinate's own sd.
    A floor on the covariance's eigenvalues (1e-12 of the largest) made the narrow
    coordinate's box 100 times too wide at 1e4, and at 1e6 the box's axes (condition
    number 1e12) were refused as not invertible."""
    sds = np.array([scale, 1.0 / scale])
    _, transform = principal_box(np.zeros(2), np.diag(sds**2), k=3.0)
    np.testing.assert_allclose(np.abs(transform.axes).max(axis=1), sds, rtol=1e-9)
    np.testing.assert_allclose(transform.axes @ transform.axes.T, np.diag(sds**2),
                               rtol=1e-9, atol=1e-9 * sds.min() ** 2)
    q = np.array([[2.0 * sds[0], -1.0 * sds[1]]])
    np.testing.assert_allclose(transform.from_box(transform.to_box(q)), q, rtol=1e-12)
    # correlated and degenerate: only the degenerate direction is lifted, to a thin box
    cov = np.outer(sds, sds)
    _, transform = principal_box(np.zeros(2), cov, k=3.0)
    np.testing.assert_allclose(np.sqrt(np.diag(transform.axes @ transform.axes.T)), sds,
                               rtol=1e-6)

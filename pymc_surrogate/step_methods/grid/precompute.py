"""SparseGridHMC's grid: built over the domain, its nodes evaluated through the batch
evaluation layer (any executor), nodes outside the support filled, or loaded from a file.

``GridPrecompute`` is the step's part that owns the grid; the step decides when it is built
(at the end of the first chain's warm-up, at first use for a given domain, or by
``SparseGridHMC.precompute()``)."""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import scipy.spatial
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag, QuadPotentialFull

from pymc_surrogate.step_methods.evaluation.batch import INFINITE, SERIAL, evaluate_logp
from pymc_surrogate.step_methods.evaluation.evaluator import (
    _first_line,
    infinite_logp_error,
)
from pymc_surrogate.step_methods.grid.domain import MAX_GROWTH, MAX_REFITS, BoxGaussian
from pymc_surrogate.surrogates.base import Domain, with_params
from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid

__all__ = ["GridPrecompute", "GridPrecomputeError", "fill_outside_support", "load_grid"]


#: The model evaluations a default grid may take (``SmolyakGrid``'s own default is larger:
#: it is built once, where a step's grid is rebuilt for each box it tries).
DEFAULT_MAX_NODES = 1000


class GridPrecomputeError(RuntimeError):
    """Model evaluations at grid nodes failed twice; the message lists their coordinates."""


class GridPrecompute:
    """SparseGridHMC's grid and its precomputed values: a part of the step, built once and
    shared by its chains.

    Parameters
    ----------
    owner : str
        The step's class name, for messages.
    estimator : SmolyakGrid, NaiveGrid or None
        The step's ``surrogate=`` (None: the full grid for d <= 2, the sparse one beyond,
        within ``DEFAULT_MAX_NODES``).
    domain : GridDomain
        How the box is found from the warm-up, refitted and grown.
    given : tuple or None
        ``(domain, transform)`` of a box given by the user (``GridDomain.given``).
    k : float
        The box's half-width in sds of its Gaussian.
    executor, max_workers, progressbar
        Where and how the node evaluations run (``evaluation/batch.py``).
    save_grid : path or None
        Where the grid is saved once built.
    functions, model, vars, evaluator
        The model the nodes are evaluated on, and how a point is described in messages.
    has_gradient : bool
        A black box's warm-up box is re-fitted to the grid's own nodes.
    """

    def __init__(self, owner: str, estimator, domain, given, k: float, executor,
                 max_workers, progressbar, save_grid, functions, model, vars, evaluator,
                 has_gradient: bool):
        self.owner = owner
        self.estimator = estimator
        self.domain = domain
        self.given = given
        self.k = k
        self.executor = executor
        self.max_workers = max_workers
        self.progressbar = progressbar
        self.save_grid = save_grid
        self.functions, self.model, self.vars = functions, model, vars
        self.evaluator = evaluator
        self.has_gradient = has_gradient
        self.dim = domain.dim
        self.grid = None  # fitted, once built or loaded
        self.box = None  # its box's Gaussian (``BoxGaussian``)
        self.info = None  # what the precompute cost (``SparseGridHMC.precompute_``)
        self._design(self._make_grid(None), Domain(np.zeros(self.dim), np.ones(self.dim)))

    def __getstate__(self):
        # The default process pool is made per precompute, never kept; a user's executor
        # (a Dask client's) need not pickle into the sampling processes.
        state = self.__dict__.copy()
        if state.get("executor") not in (*SERIAL, "auto", "process"):
            state["executor"] = None
        return state

    def use(self, grid, info: dict) -> None:
        """``grid`` (fitted) is the step's, with what it cost."""
        self.grid, self.info = grid, info
        self.box = BoxGaussian.of(grid, self.k)

    def load(self, grid) -> None:
        """A grid given to the step (``grid=``: fitted, or a file's), with no cost."""
        loaded = load_grid(grid, self.dim)
        self.use(loaded, {
            "nodes": loaded.n_nodes_, "model_evals": 0, "seconds": 0.0, "retried": 0,
            "loaded": str(grid) if isinstance(grid, str | os.PathLike) else type(grid).__name__})
        if isinstance(grid, str | os.PathLike):
            logging.getLogger("pymc").info(
                f"{self.owner}: the grid in {str(grid)!r} ({loaded.n_nodes_} nodes) is reused: "
                "no model evaluation for it. Delete the file to build a new one.")

    def build_given(self) -> None:
        """The grid over the domain given (``SparseGridHMC.precompute()``)."""
        if self.given is None:
            raise ValueError(
                "SparseGridHMC.precompute() needs the domain (domain=GridBox(bounds=...), "
                "or GridBox(mean=..., cov=...)); "
                "without it the grid is built from the warm-up, in pm.sample.")
        self.build()

    def box_metric(self, dense: bool, rng: np.random.Generator):
        """The box's Gaussian as a mass matrix: a chain's first metric on a grid built
        before it."""
        if dense:
            return QuadPotentialFull(self.box.cov.copy(), rng=rng)
        return QuadPotentialDiag(np.diag(self.box.cov).copy(), rng=rng)

    def forget(self) -> None:
        """No grid (the data changed: ``pm.set_data``) unless one was given (loaded)."""
        if self.info is None or "loaded" not in self.info:
            self.grid = self.box = None

    def build(self, warm_up: dict | None = None) -> None:
        """The grid over the given domain, or over the warm-up's box (``warm_up``: the
        arguments of ``GridDomain.from_warm_up``): for a black box re-fitted to the grid's
        own nodes while their Laplace approximation says the box misses its mass
        (``GridDomain.refitted``), then grown where the posterior has not fallen off at a
        face (``GridDomain.grown``), a full grid on its own lattice (the nodes evaluated
        kept, the grown ones added); and what it cost."""
        started = time.perf_counter()
        domain, transform = (self.given if self.given is not None
                             else self.domain.from_warm_up(**warm_up))
        spent, boxes, refits = {"model_evals": 0, "retried": 0}, 0, 0
        budget = (MAX_GROWTH + 1) * self._make_grid(None).max_nodes
        points, known = None, None  # a grown full grid's lattice, and the nodes evaluated on it
        while True:
            grid = self._make_grid(transform, points)
            potentials, evaluated, retried, timed = self._evaluate(
                grid, self._design(grid, domain), known)
            spent["model_evals"] += evaluated + retried + timed
            spent["retried"] += retried
            boxes += 1
            if self.given is not None or boxes > MAX_GROWTH:
                break
            if refits < MAX_REFITS and not self.has_gradient:
                refit = self.domain.refitted(grid, potentials)
                if refit is not None:
                    domain, transform = refit
                    points, known = None, None
                    refits += 1
                    continue
            grown = self.domain.grown(grid, potentials)
            if grown is None:
                break
            domain, points, known = grown, None, None
            lattice = _lattice(grid, grown, budget) if isinstance(grid, NaiveGrid) else None
            if lattice is not None:
                # A full grid grows on its own lattice, its nodes kept: a new grid of the
                # budget over the grown box threw them away (black-box banana: 2-4 boxes
                # of 961 nodes for a final grid of 961, min ESS 3-580; on the lattice about
                # the same evaluations give a final grid of 1426-3174, ESS 485-892). Past
                # MAX_GROWTH + 1 grids' budget of nodes the grown box gets a new grid.
                (domain, points), known = lattice, _lattice_values(grid, potentials)
        values, outside_support = fill_outside_support(potentials, grid.nodes_)
        grid.fit(grid.nodes_, values)
        info = {"nodes": int(grid.n_nodes_), "boxes": boxes, "refits": refits, **spent,
                "seconds": time.perf_counter() - started, "outside_support": outside_support}
        if self.save_grid is not None:
            info["saved"] = grid.save(self.save_grid)
        self.use(grid, info)

    def _design(self, grid, domain) -> np.ndarray:
        """The grid's nodes over ``domain``; a grid over budget named (no model evaluation:
        the constructor checks the settings with it on the unit box)."""
        try:
            return grid.design(domain)
        except ValueError as err:
            raise ValueError(
                f"{self.owner}: {err} In d = {self.dim} a grid that resolves the "
                "posterior may need more evaluations than are affordable: lower the grid's "
                "`level` or raise its `max_nodes` (surrogate=SmolyakGrid(level=..., "
                "max_nodes=...)), or use SurrogateHMC / AdaptiveSurrogateHMC, whose "
                "cost does not grow with a grid."
            ) from err

    def _make_grid(self, transform, points=None):
        """A new grid of the step's ``surrogate`` in the box's coordinates (``points``: a
        full grid of that shape, a grown box's lattice)."""
        grid = self.estimator
        if grid is None:
            grid = (NaiveGrid if self.dim <= 2 else SmolyakGrid)(max_nodes=DEFAULT_MAX_NODES)
        if points is not None:
            return with_params(grid, transform=transform, points_per_dim=points,
                               max_nodes=max(int(np.prod(points)), grid.max_nodes))
        return with_params(grid, transform=transform)

    def _evaluate(self, grid, nodes: np.ndarray, known) -> tuple[np.ndarray, int, int, int]:
        """``U`` at the grid's nodes, those in ``known`` (``_lattice_values``: a smaller
        box's nodes on the same lattice) not evaluated again: the potentials, how many
        nodes were evaluated, the retries, and the evaluations that timed the batch."""
        if known is None:
            potentials, retried, timed = self._precompute(nodes)
            return potentials, len(nodes), retried, timed
        origin, spacing, values = known
        index = _lattice_index(grid, nodes, origin, spacing)
        old = np.array([tuple(i) in values for i in index.tolist()])
        potentials = np.array([values.get(tuple(i), np.nan) for i in index.tolist()])
        retried = timed = 0
        if not old.all():
            potentials[~old], retried, timed = self._precompute(nodes[~old], partial=True)
        return potentials, int((~old).sum()), retried, timed

    def _precompute(self, nodes: np.ndarray, partial: bool = False) -> tuple[np.ndarray, int, int]:
        """``U`` at every node, through the executor, each failed node retried once; the
        retries, and the evaluations that timed the batch (``partial``: the nodes are part
        of a grid, whose other nodes may lie in the support when none of these do)."""
        n = nodes.shape[0]
        batch = evaluate_logp(nodes, self.functions, self.model, self.vars,
                              executor=self.executor, max_workers=self.max_workers,
                              progressbar=self.progressbar, label="Grid nodes",
                              owner=self.owner)
        if batch.errors and (partial or len(batch.errors) < n):  # outside the support
            return self._outside_support(nodes, batch), batch.retried, batch.timed
        infinite = [i for i in sorted(batch.errors) if batch.errors[i] == INFINITE]
        if infinite:
            raise infinite_logp_error(
                self.owner, self.evaluator.describe(nodes[infinite[0]]),
                f"grid node {infinite[0]} of {n}, and {len(infinite) - 1} more, in the "
                "precompute",
            )
        if batch.errors:
            shown = sorted(batch.errors)[:5]
            lines = "\n".join(
                f"  node {i}: {self.evaluator.describe(nodes[i])}: {batch.errors[i]}" for i in shown
            )
            raise GridPrecomputeError(
                f"SparseGridHMC: the model's logp failed at {len(batch.errors)} of {n} grid "
                f"nodes, twice each (the first {len(shown)} shown, in the sampler's "
                f"unconstrained space):\n{lines}\nFix the model there, or shrink the domain "
                "(domain=GridBox(bounds=...), GridBox(mean=..., cov=...), or a smaller k) to "
                "where its logp is finite."
            )
        return -batch.logp, batch.retried, batch.timed

    def _outside_support(self, nodes: np.ndarray, batch) -> np.ndarray:
        """``U`` at the nodes, NaN (outside the posterior's support: ``fill_outside_support``)
        where the logp raised twice or was +inf: said once, in this (the parent) process."""
        failed = sorted(batch.errors)
        logging.getLogger("pymc").warning(
            f"{self.owner}: the model's logp failed at {len(failed)} of "
            f"{nodes.shape[0]} grid nodes (twice each, or +inf), treated as outside the "
            f"posterior's support; the first, node {failed[0]}: "
            f"{self.evaluator.describe(nodes[failed[0]])}: {_first_line(batch.errors[failed[0]])}")
        potentials = -batch.logp
        potentials[failed] = np.nan
        return potentials


def _lattice(grid, grown: Domain, budget: int):
    """A full grid's grown box on the grid's own lattice: ``(domain, points per axis)``, its
    faces moved out by whole cells (the nearest to ``grown``'s), or None (more than
    ``budget`` nodes)."""
    lower, upper = grid.domain_
    shape = np.asarray(grid.shape_)
    spacing = (upper - lower) / (shape - 1)
    below = np.maximum(np.rint((lower - grown.lower) / spacing), 0.0)
    above = np.maximum(np.rint((grown.upper - upper) / spacing), 0.0)
    points = shape + below + above
    if np.prod(points) > budget:
        return None
    return (Domain(lower - below * spacing, upper + above * spacing),
            tuple(int(p) for p in points))


def _lattice_index(grid, nodes: np.ndarray, origin: np.ndarray, spacing: np.ndarray):
    """The nodes' integer coordinates on the lattice of ``origin`` and ``spacing`` (box
    coordinates)."""
    u = nodes if grid.transform is None else grid.transform.to_box(nodes)
    return np.rint((u - origin) / spacing).astype(np.int64)


def _lattice_values(grid, potentials: np.ndarray):
    """A full grid's evaluated nodes by lattice index: ``(origin, spacing, {index: U})``."""
    lower, upper = grid.domain_
    spacing = (upper - lower) / (np.asarray(grid.shape_) - 1)
    index = _lattice_index(grid, grid.nodes_, lower, spacing)
    return lower, spacing, dict(zip(map(tuple, index.tolist()), potentials.tolist()))


def fill_outside_support(potentials: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, int]:
    """Nodes where the logp is -inf or NaN lie outside the posterior's support (a
    truncation, a constraint): they get the potential continued from the support, so the
    interpolant runs smoothly past the edge and the true-logp correction rejects what
    lands beyond it.

    The continuation is a least-squares quadratic of the finite nodes, never below the
    nearest finite node's value (no well past the edge). A wall there instead (the
    largest finite potential plus the range) made the interpolant ramp up inside the last
    cell of the support, whose true mass the inner chain then hardly proposed: a normal
    truncated at 1 had its mean 0.02 low at four seeds (2.5 MCSE each, 15000 draws).
    """
    support = np.isfinite(potentials)
    if support.all():
        return potentials, 0
    if not support.any():
        raise GridPrecomputeError(
            f"SparseGridHMC: the model's logp is -inf or NaN at all {nodes.shape[0]} grid "
            "nodes: the domain misses the posterior. Give it yourself (domain=GridBox(bounds=...), "
            "or GridBox(mean=..., cov=...)) where the logp is finite."
        )
    centre, scale = nodes.mean(axis=0), nodes.std(axis=0)
    z = (nodes - centre) / np.where(scale > 0, scale, 1.0)
    features = _quadratic_features(z)
    coef = np.linalg.lstsq(features[support], potentials[support], rcond=None)[0]
    nearest = scipy.spatial.cKDTree(z[support]).query(z[~support])[1]
    filled = potentials.copy()
    filled[~support] = np.maximum(features[~support] @ coef, potentials[support][nearest])
    return filled, int((~support).sum())


def _quadratic_features(z: np.ndarray) -> np.ndarray:
    """1, z_i and z_i z_j (i <= j) for each row."""
    rows, cols = np.triu_indices(z.shape[1])
    return np.column_stack([np.ones(len(z)), z, z[:, rows] * z[:, cols]])


def load_grid(path, dim: int):
    """A grid from an ``.npz`` file (``grid=``'s), or a fitted grid object as it is."""
    if hasattr(path, "value_and_grad") and hasattr(path, "domain_"):
        grid = path
        if grid.n_features_in_ != dim:
            raise ValueError(f"the grid given has d = {grid.n_features_in_}; this step "
                             f"samples d = {dim}.")
        return grid
    with np.load(path, allow_pickle=False) as data:
        kind = str(data["kind"])
    classes = {"SmolyakGrid": SmolyakGrid, "NaiveGrid": NaiveGrid}
    if kind not in classes:
        raise ValueError(f"{path} holds a {kind!r}, not a SmolyakGrid or NaiveGrid.")
    grid = classes[kind].load(path)
    if grid.n_features_in_ != dim:
        raise ValueError(
            f"the grid in {path} has d = {grid.n_features_in_}; this step samples d = {dim}."
        )
    return grid

"""SparseGridHMC's grid: built over the domain, its nodes evaluated through the batch
evaluation layer (any executor), nodes outside the support filled, or loaded from a file."""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.spatial
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag, QuadPotentialFull

from pymc_surrogate.step_methods.evaluation.batch import INFINITE, evaluate_logp
from pymc_surrogate.step_methods.evaluation.evaluator import (
    _first_line,
    infinite_logp_error,
)
from pymc_surrogate.step_methods.grid.domain import MAX_GROWTH, MAX_REFITS
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.base import Domain, with_params
from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid

__all__ = ["GridPrecompute", "GridPrecomputeError", "fill_outside_support", "load_grid"]


#: The model evaluations a default grid may take (``SmolyakGrid``'s own default is larger:
#: it is built once, where a step's grid is rebuilt for each box it tries).
DEFAULT_MAX_NODES = 1000


class GridPrecomputeError(RuntimeError):
    """Model evaluations at grid nodes failed twice; the message lists their coordinates."""


class GridPrecompute:
    """Mixin of ``SparseGridHMC``: the grid and its precomputed values."""

    def precompute(self):
        """Build the grid now, over the domain given (``domain=GridBox(...)`` with
        ``bounds``, or ``mean`` and ``cov``), and return it (as ``grid_``; its cost in ``precompute_``). Without a
        given domain the grid is built at the end of the first chain's warm-up; a step
        made with ``grid=`` has one already."""
        if self.grid_ is None:
            if self._domain_given is None:
                raise ValueError(
                    "SparseGridHMC.precompute() needs the domain (domain=GridBox(bounds=...), "
                    "or GridBox(mean=..., cov=...)); "
                    "without it the grid is built from the warm-up, in pm.sample.")
            self._precompute_grid(None)
        return self.grid_

    def _start_on_grid(self, chain: ChainState) -> None:
        """A chain that starts on a grid built before it (given, or by an earlier chain of
        this process): the box's Gaussian as its first metric, no warm-up."""
        rng = self.rng.spawn(1)[0]
        if self.kernel_settings.dense_mass is False:
            self.kernel.use(metric=QuadPotentialDiag(np.diag(self.box_.cov).copy(), rng=rng))
        else:
            self.kernel.use(metric=QuadPotentialFull(self.box_.cov.copy(), rng=rng))
        self.refits.use_surrogate(chain, self.grid_)
        # The metric and step size re-adapt on the grid at the skeleton's refit times,
        # from iteration 52 on (the first needs tuning states for the chain's scale).
        self.schedule.last_iteration = 1

    def _learns_from_store(self) -> bool:
        """The warm-up's box is found from every chain's evaluations (the store's)."""
        return not self.pseudo_marginal

    def _refit(self, chain: ChainState) -> None:
        """The first fit, at the end of the warm-up, builds the grid (outside the refit's
        numerical-failure guard: a failing model is reported, not retried)."""
        if self.grid_ is None:
            self._read_shared(chain)
            self._precompute_grid(chain)
        super()._refit(chain)

    def _precompute_grid(self, chain) -> None:
        """The grid over the given domain, or over the warm-up's box: for a black box
        re-fitted to the grid's own nodes while their Laplace approximation says the box
        misses its mass (``GridDomain.refitted``), then grown where the posterior has not
        fallen off at a face (``GridDomain.grown``); and what it cost."""
        started = time.perf_counter()
        domain, transform = (self._domain_given if self._domain_given is not None
                             else self._warm_up_domain(chain))
        spent, boxes, refits = {"model_evals": 0, "retried": 0}, 0, 0
        while True:
            grid, potentials, retried, timed = self._grid_over(domain, transform)
            spent["model_evals"] += grid.n_nodes_ + retried + timed
            spent["retried"] += retried
            boxes += 1
            if self._domain_given is not None or boxes > MAX_GROWTH:
                break
            if refits < MAX_REFITS and not self.has_gradient:
                refit = self.domain.refitted(grid, potentials)
                if refit is not None:
                    domain, transform = refit
                    refits += 1
                    continue
            grown = self.domain.grown(grid, potentials)
            if grown is None:
                break
            domain = grown
        values, outside_support = fill_outside_support(potentials, grid.nodes_)
        grid.fit(grid.nodes_, values)
        self.grid_ = grid
        self.precompute_ = {"nodes": int(grid.n_nodes_), "boxes": boxes, "refits": refits,
                             **spent,
                            "seconds": time.perf_counter() - started,
                            "outside_support": outside_support}
        if self._save_grid is not None:
            self.precompute_["saved"] = grid.save(self._save_grid)
        self._box_gaussian()

    def _warm_up_domain(self, chain: ChainState):
        """The box from the warm-up's evaluations near the typical set
        (``GridDomain.from_warm_up``)."""
        keep = self.refits.relevant(chain)
        return self.domain.from_warm_up(
            chain.training.positions[keep], chain.training.potentials[keep],
            self.policy.mode_depth(self.dim), self.exploration.probe, len(chain.training))

    def _grid_over(self, domain, transform):
        """A grid's nodes over ``domain`` and the model's potentials there (unfitted)."""
        grid = self._make_grid(transform)
        nodes = self._design(grid, domain)
        potentials, retried, timed = self._precompute(nodes)
        return grid, potentials, retried, timed

    def _design(self, grid, domain) -> np.ndarray:
        """The grid's nodes over ``domain``; a grid over budget named (no model evaluation:
        the constructor checks the settings with it on the unit box)."""
        try:
            return grid.design(domain)
        except ValueError as err:
            raise ValueError(
                f"SparseGridHMC: {err} In d = {self.dim} a grid that resolves the "
                "posterior may need more evaluations than are affordable: lower the grid's "
                "`level` or raise its `max_nodes` (surrogate=SmolyakGrid(level=..., "
                "max_nodes=...)), or use SurrogateHMC / AdaptiveSurrogateHMC, whose "
                "cost does not grow with a grid."
            ) from err

    def _check_grid_settings(self) -> None:
        self._design(self._make_grid(None), Domain(np.zeros(self.dim), np.ones(self.dim)))

    def _make_grid(self, transform):
        """A new grid of the step's ``surrogate`` (by default the full grid for d <= 2, the
        sparse one beyond, within ``DEFAULT_MAX_NODES``) in the box's coordinates."""
        grid = self.surrogate
        if grid is None:
            grid = (NaiveGrid if self.dim <= 2 else SmolyakGrid)(max_nodes=DEFAULT_MAX_NODES)
        return with_params(grid, transform=transform)

    def _precompute(self, nodes: np.ndarray) -> tuple[np.ndarray, int, int]:
        """``U`` at every node, through the executor, each failed node retried once; the
        retries, and the evaluations that timed the batch."""
        n = nodes.shape[0]
        batch = evaluate_logp(nodes, self.functions, self._model, self.vars,
                              executor=self.executor, max_workers=self.max_workers,
                              progressbar=self.progressbar, label="Grid nodes",
                              owner=type(self).__name__)
        if batch.errors and len(batch.errors) < n:  # failed nodes: outside the support
            return self._outside_support(nodes, batch), batch.retried, batch.timed
        infinite = [i for i in sorted(batch.errors) if batch.errors[i] == INFINITE]
        if infinite:
            raise infinite_logp_error(
                type(self).__name__, self.evaluator.describe(nodes[infinite[0]]),
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
            f"{type(self).__name__}: the model's logp failed at {len(failed)} of "
            f"{nodes.shape[0]} grid nodes (twice each, or +inf), treated as outside the "
            f"posterior's support; the first, node {failed[0]}: "
            f"{self.evaluator.describe(nodes[failed[0]])}: {_first_line(batch.errors[failed[0]])}")
        potentials = -batch.logp
        potentials[failed] = np.nan
        return potentials


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

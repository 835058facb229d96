"""``GridFit``: SparseGridHMC's surrogate family, a grid fitted once before sampling.

The grid is built and evaluated at the end of the first chain's warm-up (or given): a
refit fits nothing, and only re-adapts the metric and step size on the grid. The chain's
scale is the box's Gaussian (the Laplace approximation, checked by the model) until the
chain has states enough to estimate it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.evaluation.batch import SERIAL
from pymc_surrogate.step_methods.grid.domain import GridDomain
from pymc_surrogate.step_methods.grid.field import (
    OUTSIDE_SHARE,
    POOR_MOVE_RATE,
    GridPotential,
    ghmc_complete_transition,
    outside_states_message,
    poor_moves_message,
    short_tuning_message,
)
from pymc_surrogate.step_methods.grid.precompute import GridPrecompute
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["COMPOUND_BLACK_BOX", "GHMC_COMPLETE", "GridFit", "GridSettings", "grid_family",
           "grid_settings"]

#: Told for a black-box SparseGridHMC in a compound step.
COMPOUND_BLACK_BOX = (
    "SparseGridHMC in a CompoundStep without a gradient: the grid interpolates this block's "
    "potential at the other variables' values when it is built. The draws stay exact "
    "(true-logp correction) but mix poorly when those values move far; sample all "
    "continuous variables with one SparseGridHMC where you can."
)
#: Told with ``exact=False``.
GHMC_COMPLETE = (
    "SparseGridHMC(exact=False): the paper's GHMC-complete. After tuning, draws inside the "
    "domain are accepted with the interpolated potential, not the model's: they follow "
    "exp(-U~), whose KL divergence from the posterior is at most 2 max|U - U~| "
    "(sparse-grid-hmc Thm 5.1), not the exact posterior (stat `approximate`). Use "
    "exact=True for exact draws."
)


class GridFit(SurrogateFit):
    """The step's grid, in the scale of its box.

    Parameters
    ----------
    estimator, learned, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    field : callable
        ``(chain, model_outside) -> field``: the grid's field; the metric and step size
        are tuned on it with ``model_outside=False``.
    precompute : GridPrecompute
        Builds and holds the grid.
    potential : GridPotential
        The grid's potential inside its box and the model's continuation outside.
    exploration : Exploration
        The warm-up whose probe and states the box is found from, and the fallback kernel
        outside the box.
    tuning : Tuning
        ``refit_growth``, ``refit_offset``: the first re-adaptation on the grid.
    start_at_centre : bool
        A chain's first iteration on the grid starts at the box's centre where the
        warm-up found the box (not given, nor a grid).
    """

    weighted = False

    def __init__(self, estimator, learned, policy, context, dim: int, has_gradient: bool,
                 field: Callable, precompute, potential, exploration, tuning,
                 start_at_centre: bool = False):
        super().__init__(estimator, learned, policy, context, dim, has_gradient)
        self.field = field
        self.precompute, self.potential = precompute, potential
        self.exploration, self.tuning = exploration, tuning
        self.start_at_centre = start_at_centre

    def check_step(self, frame_learned: bool, compound: bool, exact: bool) -> None:
        """Refuse a learned frame; warn of a black box's grid in a compound step and of
        the approximate draws of ``exact=False``."""
        if frame_learned:
            raise ValueError(
                "SparseGridHMC builds its grid in the affine frame only: frame='triangular' "
                "is SurrogateHMC's, AdaptiveSurrogateHMC's, VariationalHMC's and KernelHMC's.")
        if compound and not self.has_gradient:
            warnings.warn(COMPOUND_BLACK_BOX, UserWarning, stacklevel=4)
        if not exact:
            warnings.warn(GHMC_COMPLETE, UserWarning, stacklevel=4)

    def enter(self, q: np.ndarray, first: bool, start_on_grid: Callable[[], None]) -> np.ndarray:
        """Where an iteration starts: a given domain's grid is built at first use; a chain's
        first iteration on the grid starts on it (``start_on_grid`` where no grid was
        fitted yet), at the box's centre where the warm-up found the box."""
        if self.precompute.grid is None and self.precompute.given is not None:
            self.precompute.build()
        if self.precompute.grid is None or not first:
            return q
        if self.learned.surrogate is None:
            start_on_grid()
        return self.potential.tuning_start(q) if self.start_at_centre else q

    def start_on_grid(self, kernel, refits, schedule, dense: bool,
                      rng: np.random.Generator) -> None:
        """A chain that starts on a grid built before it: the box's Gaussian as its first
        metric, no warm-up; the metric and step size re-adapt on the grid at the refit
        times from iteration 52 on."""
        kernel.use(metric=self.precompute.box_metric(dense, rng.spawn(1)[0]))
        refits.use_surrogate(self.precompute.grid)
        schedule.start_after(1)

    def forget_the_old_data(self) -> None:
        """The grid built from the old data's posterior goes (a given one stays)."""
        self.precompute.forget()

    def approximate_point(self, q: np.ndarray, evaluate: Callable) -> ChainPoint:
        """The state ``q`` with the grid's potential (``exact=False``'s draws)."""
        return ChainPoint(q, self.potential.grid_potential(q, evaluate), None)

    def approximate_transition(self, current: ChainPoint, field: Callable, evaluate: Callable,
                               kernel, rng: np.random.Generator) -> TransitionInfo:
        """``exact=False``'s draw: accepted with the grid's energy inside the box."""
        return ghmc_complete_transition(
            current, field, lambda q, value: self.potential.grid_potential(q, evaluate, value),
            kernel, rng)

    def prepare_refit(self, access) -> bool:
        """The first fit, at the end of the warm-up, builds the grid (outside the refit's
        numerical-failure guard: a failing model is reported, not retried)."""
        if self.precompute.grid is None:
            access.read_shared()
            keep, training = self.learned.relevant(), self.learned.training
            self.precompute.build(None if self.precompute.given is not None else {
                "positions": training.positions[keep], "potentials": training.potentials[keep],
                "mode_depth": self.policy.mode_depth(self.dim),
                "probe": self.exploration.probe, "n_evaluations": len(training)})
        return True

    def tuning_ended(self, access, exact: bool, suggested_tune: int) -> None:
        """A chain's tuning on the grid is over: warn where it moved poorly in the box or
        tuned too briefly to re-adapt on the grid, and give a black box's draws a share of
        the exact exploration kernel when its states lay outside the box."""
        states, tuned = self.learned.late_states()[0], access.chain.iteration
        moves = self.potential.move_rate_in_box(states)
        if moves is not None and moves < POOR_MOVE_RATE:
            access.warn(WarningType.BAD_ACCEPTANCE, poor_moves_message(moves))
        # the first re-adaptation on the grid (a chain on a grid starts its schedule at 1)
        first_refit = int(np.ceil(self.tuning.refit_growth + self.tuning.refit_offset))
        if tuned < first_refit:
            access.warn(WarningType.BAD_PARAMS,
                        short_tuning_message(tuned, first_refit, suggested_tune))
        share = self.potential.outside_share(states) if not self.has_gradient else 0.0
        if (exact and share > self.potential.outside_threshold()
                and self.exploration.probability == 0.0):
            self.exploration.freeze(access.model_access(), access.rng,
                                    probability=min(share, OUTSIDE_SHARE[1]))
            if share > 0.2:
                access.warn(WarningType.BAD_PARAMS,
                            outside_states_message(share, self.exploration.probability))

    def fit(self, chain, keep: np.ndarray, rng: np.random.Generator, **settings):
        """The grid: a designed surrogate is fitted once, before sampling."""
        return self.precompute.grid

    def scale_frame(self) -> Whitening:
        """The box's Gaussian: mass matrices are estimated relative to it (a ridge
        regression's sd of 3.5e-5 drowned in an absolute regulariser: step size 2e-3,
        256 leapfrog steps a draw, ESS 5)."""
        box = self.precompute.box
        return Whitening(box.mean, robust_cholesky(box.cov))

    def posterior_scale(self, states: np.ndarray, evaluated: Callable[[], np.ndarray],
                        dense: bool) -> Whitening:
        """The box's Gaussian until tuning has ``5 d`` distinct late states (at least 20)
        to estimate the scale from (d = 20 with tune = 3 re-adapted the metric on a
        handful of states: sd z-scores down to -7.7), then the states' covariance."""
        box = self.scale_frame()
        if len(np.unique(states, axis=0)) >= max(20, 5 * self.dim):
            return Whitening.from_samples(states, dense=dense, frame=box)
        return box if dense else Whitening(box.mean, np.sqrt(np.diag(self.precompute.box.cov)))

    def dense_at_first(self, mass_matrix, probe, states: np.ndarray) -> bool:
        """``dense_mass="auto"``: dense when the box's Gaussian is strongly correlated (a
        grid's chain makes no exploration probe: a ridge regression, correlation
        -0.99999, then got a diagonal metric, ESS 5)."""
        return mass_matrix.dense_at_first(self.precompute.box.cov, None)

    def warm_up_field(self, chain):
        """The grid alone, with its continuation outside the box, never the model (an
        adjoint PDE's warm-up otherwise spent thousands of solves on trajectories that
        leave the box)."""
        return self.field(chain, model_outside=False)


class GridSettings(NamedTuple):
    """SparseGridHMC's settings of its grid, checked (``grid_settings``)."""

    grid: Any  # a fitted grid or a file that exists (None: built)
    domain: Any  # GridBox
    executor: Any
    max_workers: int | None
    progressbar: bool | str
    save_grid: Any  # where a built grid is saved (a ``grid=`` file that does not exist)
    exact: bool

    @property
    def start_at_centre(self) -> bool:
        """The box is found by the warm-up (neither a grid nor bounds given)."""
        return self.grid is None and self.domain.bounds is None


def grid_family(step, settings: GridSettings) -> GridFit:
    """``step``'s grid family: its precompute, its potential and their ``GridFit`` (no
    model evaluation here)."""
    k, box = float(settings.domain.k), settings.domain
    shape = GridDomain(step.dim, k, step.has_gradient)
    precompute = GridPrecompute(
        type(step).__name__, step.surrogate, shape, shape.given(box.bounds, box.mean, box.cov),
        k, settings.executor, settings.max_workers, settings.progressbar, settings.save_grid,
        step.functions, step._model, step.vars, step.evaluator, step.has_gradient)
    potential = GridPotential(precompute, step.context, step.functions, step.evaluator,
                              step.has_gradient, k, step.tuning.far_sd)
    return GridFit(step.surrogate, step.learned, step.policy, step.context, step.dim,
                   step.has_gradient, step._surrogate_field, precompute, potential,
                   step.exploration, step.tuning, settings.start_at_centre)


def grid_settings(owner: str, grid, domain, executor, progressbar, exact,
                  kwargs: dict) -> GridSettings:
    """SparseGridHMC's grid settings, checked: a ``grid=`` path that does not exist yet is
    where the grid is saved once built, an ``executor=`` number that many worker
    processes. Refuses the flattened spellings of earlier releases (in ``kwargs``) with
    the one that works."""
    for flat, spelled in (("kind", "surrogate=SmolyakGrid() or surrogate=NaiveGrid()"),
                          ("save_grid", "grid='file.npz' (built and saved there when "
                           "the file does not exist, reused when it does)"),
                          ("max_workers", "executor=<number of worker processes>")):
        if flat in kwargs:
            raise TypeError(f"{owner}: {flat} is gone: pass {spelled}.")
    if not (progressbar == "auto" or isinstance(progressbar, bool | np.bool_)):
        raise ValueError(f"progressbar must be True, False or 'auto'; got {progressbar!r}.")
    max_workers = None
    if isinstance(executor, int | np.integer) and not isinstance(executor, bool):
        if executor < 1:
            raise ValueError(f"executor as a number of worker processes must be at least "
                             f"1; got {executor!r}.")
        executor, max_workers = "process", int(executor)
    if not (executor in SERIAL or executor in ("auto", "process")
            or hasattr(executor, "submit") or hasattr(executor, "map")):
        raise ValueError(
            "executor must be 'auto', 'process', a number of worker processes, 'serial', "
            "None, or an object with submit or map (a concurrent.futures.Executor, a Dask "
            f"client's get_executor()); got {executor!r}."
        )
    save_grid = None
    if isinstance(grid, str | os.PathLike) and not os.path.exists(grid):
        grid, save_grid = None, grid  # built, then saved there
    if (grid is not None and not isinstance(grid, str | os.PathLike)
            and (domain.bounds is not None or domain.mean is not None)):
        raise ValueError("give a grid or the domain it is to cover, not both (a grid "
                         "brings its own domain).")
    if not isinstance(exact, bool | np.bool_):
        raise ValueError(f"exact must be True or False; got {exact!r}.")
    return GridSettings(grid, domain, executor, max_workers, progressbar, save_grid,
                        bool(exact))

"""SparseGridHMC: HMC on a grid interpolant precomputed over a domain of interest
(sparse-grid-hmc §3.3-3.5, Algorithms 2-3, §5)."""

from __future__ import annotations

import os
import warnings

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.evaluation.batch import SERIAL
from pymc_surrogate.step_methods.grid.domain import BoxGaussian, GridDomain
from pymc_surrogate.step_methods.grid.field import OUTSIDE_SHARE, GridField
from pymc_surrogate.step_methods.grid.grid_fit import GridFit
from pymc_surrogate.step_methods.grid.precompute import (
    GridPrecompute,
    GridPrecomputeError,
    load_grid,
)
from pymc_surrogate.step_methods.settings import GridBox, part_setting
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid

__all__ = ["SparseGridHMC", "GridPrecomputeError"]

#: Below this acceptance of grid trajectories in late tuning, a chain is told its grid
#: does not follow the model (measured: a rough potential 0.14-0.16, a banana 0.75).
POOR_MOVE_RATE = 0.3


class SparseGridHMC(GridPrecompute, GridField, SurrogateStep):
    r"""HMC on a grid interpolant of the potential, precomputed before sampling.

    The potential ``U = -logp`` is evaluated once at the nodes of a grid over a domain of
    interest (a Smolyak sparse grid, or a full grid for ``d <= 3``), in parallel on any
    ``concurrent.futures.Executor``; the trajectories run on its interpolant inside the
    domain and on the true model outside it (sparse-grid-hmc eq. 3.11). By default every
    draw is accepted with the true logp, so the chain targets the exact posterior. The
    constructor evaluates nothing: the grid is built at the end of the first chain's
    warm-up (the exact exploration every step method tunes with, shared by the chains
    through ``store``), over a box found from it, and later chains of the process start on
    it; over a given domain it is built at first use, or now by ``precompute()``; with
    ``cores>1`` each process builds its own.

    Parameters
    ----------
    vars : list of continuous variables, optional (default: all of the model's)
    grid : str, path or grid, optional
        An ``.npz`` file: reused (nodes and values, no model evaluation) when it exists,
        else the grid is built as below and saved there; or a fitted grid (``precompute()``'s,
        ``SmolyakGrid.load``'s). A file that exists brings its own domain: a script run
        again with the same ``grid=`` and ``domain=`` reuses what the first run built.
    domain : GridBox, optional
        The box the grid covers: ``GridBox(bounds=(lower, upper))`` (axis-aligned, in the
        sampler's unconstrained space) or ``GridBox(mean=..., cov=..., k=3)`` (``±k`` sds
        along the principal axes of ``cov``). Default: found from the warm-up's
        exploration iterations (every chain's in the store): ``±k`` sds along the
        principal axes of the evaluations within ``d / 2 + 3 sqrt(d / 2)`` of the lowest
        potential (with a gradient: of the climb's Laplace approximation), wide enough to
        hold those evaluations; for a black box re-fitted (at most ``MAX_REFITS`` times, a
        grid each) to ``±k`` sds of the Laplace approximation of its grid's nodes when
        their quadratic fits them and the box holds less than ``REFIT_MASS`` of its mass
        (a random walk's evaluations in d = 20 gave a box of 39% of the posterior's mass);
        then grown by half its width past each face where the grid's nodes have not risen
        ``k^2 / 4`` above the lowest (at most ``MAX_GROWTH`` times, a grid each): the
        Laplace box of §3.5 missed the banana's arms (§6).
    surrogate : SmolyakGrid or NaiveGrid, optional
        The grid, with its settings: ``SmolyakGrid(level=..., max_nodes=...)`` (a sparse
        grid; "auto" level: the finest within ``max_nodes``, a finer one raises) or
        ``NaiveGrid(points_per_dim=..., max_nodes=...)`` (a full grid). Default: the full
        grid for ``d <= 2``, the sparse one beyond, within 1000 model evaluations. The step
        sets its transform (the box's principal axes).
    executor : "auto", "process", int, "serial", None or an Executor
        Where the node evaluations run. "auto" (default): "process" when the grid would take
        more than ``PARALLEL_AFTER`` seconds (10) in this process, judged from one timed
        logp, else "serial" (starting worker processes costs seconds: a cheap model is
        faster here). "process": a ``ProcessPoolExecutor`` of as many processes as CPUs,
        an integer: of that many (spawn: a script must keep its sampling under
        ``if __name__ == "__main__":``, and a worker that would re-run an unguarded script
        stops and says so), created and shut down here; "serial" or None: in this
        process; or any object with ``submit`` (or ``map``), e.g.
        ``distributed.Client(...).get_executor()``. Remote evaluation pickles the model
        (cloudpickle); a failed node is retried once, then reported with its coordinates.
    progressbar : bool or "auto"
        Show the precompute's progress. "auto" (default): when the grid would take more than
        ``PARALLEL_AFTER`` seconds (10) in this process, judged from one timed logp.
        ``pm.sample(progressbar=False)`` does not hide it: pass ``progressbar=False`` here.
    exact : bool
        ``True`` (default): every draw is accepted with the true logp. ``False``: the
        paper's GHMC-complete (§5): after tuning, the acceptance uses the interpolated
        energy inside the domain (the true one outside); the draws follow
        ``exp(-U~)``, not the model (a warning, and the stat ``approximate``).
    kernel : HMCKernel, optional
        As ``SurrogateHMC``; default ``HMCKernel(n_inner=1)``. Its correction
        ``"hamiltonian"`` is the paper's Algorithm 3 (one trajectory accepted with the true
        Hamiltonian).
    **kwargs
        Everything ``SurrogateHMC`` takes: ``warmup``, ``target_accept``, ``tail_jumps``,
        ``store``, ``use_gradient``, ``model``, ``rng``, ``initial_point``,
        ``compile_kwargs``, ``blocked``; ``frame`` "auto" or "affine" only.

    Notes
    -----
    sparse-grid-hmc §3.3-3.5, Algorithms 2-3, §5, §6, App. B. The box is rotated to the
    principal axes of the warm-up's evaluations (the paper's is axis-aligned). Outside the domain a gradient model's
    trajectories use its exact potential and gradient (counted in ``model_evals``),
    blended in over one box sd so that the potential has no jump at the faces; a black
    box has no gradient there: its trajectories follow the interpolant at the nearest face
    plus the box Gaussian's rise beyond it, and a share of its draws (that of its late
    tuning states outside the box) are exact gradient-free exploration steps. Nodes
    where the logp is -inf or NaN (a truncation or constraint inside the box) are outside
    the support: the interpolant continues the potential there (a quadratic fitted to the
    finite nodes) and the correction rejects what crosses the edge; a node whose
    evaluation *raises* is a failure (retried once, then reported). The
    precompute's cost is in ``precompute_`` (``nodes``, ``boxes``, ``refits``, ``model_evals``,
    ``seconds``, ``retried``, ``outside_support``). Stats beyond ``SurrogateHMC``'s: ``approximate``,
    ``in_domain``.

    References
    ----------
    .. [1] Zhang, Shahbaba & Zhao (2017), "Precomputing strategy for Hamiltonian Monte
       Carlo method based on regularity in parameter space", *Computational Statistics*
       32, 253-279.

    Examples
    --------
    >>> step = SparseGridHMC(grid="grid.npz")  # inside a model context
    >>> idata = pm.sample(step=step, tune=1000)  # the grid is built after the warm-up, saved
    >>> step = SparseGridHMC(grid="grid.npz")  # later: reused, no model evaluation for it
    """

    name = "sparse_grid_hmc"
    # ``GridFit.fit`` returns the precomputed grid; the evaluations tune records serve
    # the exploration kernel and the skeleton's checks (the spurious-well floor), never a fit.
    policy = TrainingPolicy(source="design", refit="once")
    stats_dtypes_shapes = {
        **_stats.STATS,
        "approximate": (bool, []),
        "in_domain": (bool, []),
    }

    surrogate_family = (SmolyakGrid, NaiveGrid)

    def __init__(
        self,
        vars=None,
        *,
        grid=None,
        domain: GridBox | None = None,
        executor="auto",
        progressbar: bool | str = "auto",
        exact: bool = True,
        **kwargs,
    ):
        owner = type(self).__name__
        if not isinstance(exact, bool | np.bool_):
            raise ValueError(f"exact must be True or False; got {exact!r}.")
        for flat, spelled in (("kind", "surrogate=SmolyakGrid() or surrogate=NaiveGrid()"),
                              ("save_grid", "grid='file.npz' (built and saved there when "
                               "the file does not exist, reused when it does)"),
                              ("max_workers", "executor=<number of worker processes>")):
            if flat in kwargs:
                raise TypeError(f"{owner}: {flat} is gone: pass {spelled}.")
        domain = part_setting(domain, GridBox, GridBox(), owner, "domain", kwargs)
        if not (progressbar == "auto" or isinstance(progressbar, bool | np.bool_)):
            raise ValueError(f"progressbar must be True, False or 'auto'; got {progressbar!r}.")
        self.max_workers = None
        if isinstance(executor, int | np.integer) and not isinstance(executor, bool):
            if executor < 1:
                raise ValueError(f"executor as a number of worker processes must be at least "
                                 f"1; got {executor!r}.")
            executor, self.max_workers = "process", int(executor)
        if not (executor in SERIAL or executor in ("auto", "process")
                or hasattr(executor, "submit") or hasattr(executor, "map")):
            raise ValueError(
                "executor must be 'auto', 'process', a number of worker processes, 'serial', "
                "None, or an object with submit or map (a concurrent.futures.Executor, a Dask "
                f"client's get_executor()); got {executor!r}."
            )
        self._save_grid = None
        if isinstance(grid, str | os.PathLike) and not os.path.exists(grid):
            grid, self._save_grid = None, grid  # built, then saved there
        if (grid is not None and not isinstance(grid, str | os.PathLike)
                and (domain.bounds is not None or domain.mean is not None)):
            raise ValueError("give a grid or the domain it is to cover, not both (a grid "
                             "brings its own domain).")
        self.exact = bool(exact)
        self.k = float(domain.k)
        self.executor = executor
        self.progressbar = progressbar
        self.grid_ = None
        self._grid_given = grid is not None
        self._start_at_centre = grid is None and domain.bounds is None
        if not self.exact:
            kwargs["tail_jumps"] = 0  # every draw is a grid move: no tail jumps
        super().__init__(vars, **kwargs)
        if self.frame.learned:
            raise ValueError(
                "SparseGridHMC builds its grid in the affine frame only: frame='triangular' "
                "is SurrogateHMC's, AdaptiveSurrogateHMC's, VariationalHMC's and KernelHMC's.")
        if self.context.dim and not self.has_gradient:
            warnings.warn(
                "SparseGridHMC in a CompoundStep without a gradient: the grid interpolates "
                "this block's potential at the other variables' values when it is built. "
                "The draws stay exact (true-logp correction) but mix poorly when those values "
                "move far; sample all continuous variables with one SparseGridHMC where you "
                "can.",
                UserWarning,
                stacklevel=2,
            )
        # No model evaluation here: the grid is built at first use (``_refit``,
        # ``_current_point``) or by ``precompute()``.
        self.domain = GridDomain(self.dim, self.k, self.has_gradient)
        self._domain_given = self.domain.given(domain.bounds, domain.mean, domain.cov)
        self._check_grid_settings()
        if grid is not None:
            self.grid_ = load_grid(grid, self.dim)
            self.precompute_ = {"nodes": self.grid_.n_nodes_, "model_evals": 0, "seconds": 0.0,
                                "retried": 0, "loaded": str(grid) if isinstance(grid, str | os.PathLike) else type(grid).__name__}
            self._box_gaussian()
            self.chain = self._new_chain()
        if not self.exact:
            warnings.warn(
                "SparseGridHMC(exact=False): the paper's GHMC-complete. After tuning, draws "
                "inside the domain are accepted with the interpolated potential, not the "
                "model's: they follow exp(-U~), whose KL divergence from the posterior is at "
                "most 2 max|U - U~| (sparse-grid-hmc Thm 5.1), not the exact posterior "
                "(stat `approximate`). Use exact=True for exact draws.",
                UserWarning,
                stacklevel=2,
            )

    def default_surrogate(self):
        """None: the grid's kind follows the dimension (``GridPrecompute._make_grid``)."""
        return None

    # ------------------------------------------------------------ the chain
    def _forget_the_old_data(self) -> None:
        """The grid built from the old data's posterior goes too (a given one stays)."""
        super()._forget_the_old_data()
        if not self._grid_given:
            self.grid_ = None
            self.__dict__.pop("box_", None)

    def _box_gaussian(self) -> None:
        """The grid's box and its Gaussian (``BoxGaussian``)."""
        self.box_ = BoxGaussian.of(self.grid_, self.k)

    box_mean_ = property(lambda self: self.box_.mean, doc="The box's Gaussian's mean.")
    box_cov_ = property(lambda self: self.box_.cov, doc="The box's Gaussian's covariance.")

    def _new_chain(self) -> ChainState:
        chain = super()._new_chain()
        if getattr(self, "grid_", None) is not None and hasattr(self, "box_"):
            self._start_on_grid(chain)
        return chain

    def _surrogate_fit(self) -> GridFit:
        """The grid, in its box's scale (``grid/grid_fit.py``)."""
        return GridFit(self.surrogate, self.policy, self.context, self.dim, self.has_gradient,
                       self._grid_and_box, self._surrogate_field)

    def _grid_and_box(self):
        return self.grid_, self.box_

    def _measures_coverage(self) -> bool:
        # Its field is the interpolant inside the box and the model outside: a temperature
        # would break it at the faces. Its coverage is the box's (``_outside_share``).
        return False

    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        self._q_now = q
        if self.grid_ is None and self._domain_given is not None:
            self._precompute_grid(None)  # a given domain: built at first use
        if (self.grid_ is not None and chain.surrogate is None and self.tune
                and chain.iteration == 0):
            self._start_on_grid(chain)
        if (self.grid_ is not None and self.tune and chain.iteration == 0 and self._start_at_centre
                and not self.grid_.contains(q) and self._centre_is_higher(q)):
            # Tuning starts at the Laplace mean (a mode estimate), as the skeleton's climb
            # to the mode does: from PyMC's initial point far outside the box a black box's
            # chain crawled on the continuation (conjugate regression: step size 1e-4,
            # never in the box in 1800 iterations). Not for a box given as bounds (its
            # centre need not be near the posterior), nor when the model says the centre
            # is less probable than the start (a banana's probe put it at beta = (9, 7.5),
            # where chains that started crawled: R-hat 3).
            q = self.box_.mean.copy()
        if not self._approximate(chain):
            return super()._current_point(chain, q)
        if chain.current is not None and chain.current_key == self.evaluator.key(q):
            return chain.current
        return ChainPoint(q, self._grid_potential(chain, q), None)

    def stop_tuning(self):
        chain = self.chain
        first = not chain.frozen
        if self.grid_ is None:  # tuning ended before the warm-up did
            return super().stop_tuning()
        share = self._outside_share(chain) if first and not self.has_gradient else 0.0
        moves = self._move_rate_in_box(chain) if first else None
        tuned = chain.iteration
        super().stop_tuning()
        if moves is not None and moves < POOR_MOVE_RATE:
            self._warn(
                chain, WarningType.BAD_ACCEPTANCE,
                f"the model accepted {moves:.0%} of a chain's grid trajectories in the second "
                "half of tuning: the interpolant does not follow the model's potential there "
                "(a potential rough or noisy at the grid's spacing, which the method assumes "
                "smooth, or a grid too coarse for the dimension). The draws stay exact but "
                "may not mix: check R-hat and ESS, or use SurrogateHMC, whose regression "
                "smooths what a grid interpolates.",
            )
        # the first re-adaptation on the grid (``_new_chain`` sets the schedule's start at 1)
        first_refit = int(np.ceil(self.tuning.refit_growth + self.tuning.refit_offset))
        if first and tuned < first_refit:
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"a chain ended tuning after {tuned} iterations, too early to adapt its step "
                f"size and mass matrix on the grid (from iteration {first_refit} on): its draws "
                "run on the grid with the first guesses, which stays exact but may mix "
                f"poorly. Increase `tune` (to at least {self.refits.suggested_tune()}).",
            )
        high = OUTSIDE_SHARE[1]
        if (self.exact and share > self._outside_threshold()
                and self.exploration.probability == 0.0):
            self.exploration.freeze(self._model_access(chain), self.rng,
                                    probability=min(share, high))
            if share > 0.2:
                self._warn(
                    chain, WarningType.BAD_PARAMS,
                    f"{share:.0%} of a chain's late tuning states lie outside the grid's box, "
                    f"where a black box has no model of the posterior: "
                    f"{self.exploration.probability:.0%} of its draws use the exact gradient-free "
                    "exploration kernel (stat `fallback`), which is correct but mixes slowly. "
                    "Widen the box (domain=GridBox(k=...) with a larger k, or GridBox(bounds=...) "
                    "/ GridBox(mean=..., cov=...) that cover the "
                    "posterior).",
                )
        if not self.exact:
            self.exploration.never_in_draws()  # one target: exp(-U~) everywhere
            self.chain.current = self.chain.current_key = None  # its potential is U~ now

    def _choose_draw_length(self, chain: ChainState, tuned: float) -> None:
        if self.exact:
            super()._choose_draw_length(chain, tuned)

    def _extra_stats(self, chain: ChainState) -> dict:
        point = chain.current
        inside = point is not None and self.grid_ is not None and self.grid_.contains(point.q)
        stats = {"approximate": self._approximate(chain), "in_domain": inside}
        if stats["approximate"]:
            stats["model_logp"] = np.nan
        return stats

    def __getstate__(self):
        # The default process pool is made per precompute, never kept; a user's executor
        # (a Dask client's) need not pickle into the sampling processes.
        state = self.__dict__.copy()
        if state.get("executor") not in (*SERIAL, "auto", "process"):
            state["executor"] = None
        return state



"""SparseGridHMC: HMC on a grid interpolant precomputed over a domain of interest
(sparse-grid-hmc §3.3-3.5, Algorithms 2-3, §5)."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.grid.grid_fit import (
    GridFit,
    grid_family,
    grid_settings,
)
from pymc_surrogate.step_methods.grid.precompute import GridPrecomputeError
from pymc_surrogate.step_methods.settings import GridBox, part_setting
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid

__all__ = ["SparseGridHMC", "GridPrecomputeError"]


class SparseGridHMC(SurrogateStep):
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
        ``k^2 / 4`` above the lowest (at most ``MAX_GROWTH`` times, a full grid on its
        lattice, nodes kept): the Laplace box of §3.5 missed the banana's arms (§6).
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
        Everything ``SurrogateHMC`` takes: ``warmup``, ``target_accept``,
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
    default_frame = "affine"  # the grid is built once, in the affine frame
    stats_dtypes_shapes = {**_stats.STATS, "approximate": (bool, []), "in_domain": (bool, [])}
    surrogate_family = (SmolyakGrid, NaiveGrid)

    def __init__(self, vars=None, *, grid=None, domain: GridBox | None = None,
                 executor="auto", progressbar: bool | str = "auto", exact: bool = True,
                 **kwargs):
        owner = type(self).__name__
        domain = part_setting(domain, GridBox, GridBox(), owner, "domain", kwargs)
        self.grid_settings = grid_settings(owner, grid, domain, executor, progressbar, exact,
                                           kwargs)
        self.exact = self.grid_settings.exact
        super().__init__(vars, **kwargs)
        self.fit.check_step(self.frame.learned, self.context.dim > 0, self.exact)
        self.health.also_check(self.fit.potential.watch)  # the share outside the box
        if self.grid_settings.grid is not None:
            self.fit.precompute.load(self.grid_settings.grid)
            self.chain = self._new_chain()

    def default_surrogate(self):
        """None: the grid's kind follows the dimension (``GridPrecompute``)."""
        return None

    grid_ = property(lambda self: self.fit.precompute.grid, doc="The fitted grid (or None).")
    box_ = property(lambda self: self.fit.precompute.box, doc="The box's ``BoxGaussian``.")
    precompute_ = property(lambda self: self.fit.precompute.info,
                           doc="What the grid cost (see Notes), and where it was saved.")
    box_mean_ = property(lambda self: self.box_.mean, doc="The box's Gaussian's mean.")
    box_cov_ = property(lambda self: self.box_.cov, doc="The box's Gaussian's covariance.")

    def precompute(self):
        """Build the grid now, over the domain given (``domain=GridBox(...)`` with
        ``bounds``, or ``mean`` and ``cov``), and return it (as ``grid_``; its cost in
        ``precompute_``). Without a given domain the grid is built at the end of the first
        chain's warm-up; a step made with ``grid=`` has one already."""
        if self.grid_ is None:
            self.fit.precompute.build_given()
        return self.grid_

    # ------------------------------------------------------------ the grid family
    def _surrogate_fit(self) -> GridFit:
        """The grid, in its box's scale (``grid/grid_fit.py``): no model evaluation here;
        the grid is built at first use (``GridFit.prepare_refit``, ``GridFit.enter``) or
        by ``precompute()``."""
        return grid_family(self, self.grid_settings)

    def _new_chain(self) -> ChainState:
        chain = super()._new_chain()
        if self.grid_ is not None:  # built before this chain (given, or by an earlier one)
            self._start_on_grid()
        return chain

    def _start_on_grid(self) -> None:  # (``GridFit.start_on_grid``)
        self.fit.start_on_grid(self.kernel, self.refits, self.schedule,
                               self.kernel_settings.dense_mass is not False, self.rng)

    # ------------------------------------------------------------ the iteration
    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        self._q_now = q
        q = self.fit.enter(q, self.tune and chain.iteration == 0, self._start_on_grid)
        if self._approximate(chain) and (chain.current is None
                                         or chain.current_key != self.evaluator.key(q)):
            return self.fit.approximate_point(q, self._unrecorded(chain))
        return super()._current_point(chain, q)

    def _unrecorded(self, chain: ChainState):
        """The chain's model evaluations that are no training data (``GridPotential``)."""
        return lambda q, with_grad: self._evaluate(chain, q, with_grad=with_grad, record=False)

    def _surrogate_field(self, chain: ChainState, model_outside: bool = True):
        return self.fit.potential.field(self._unrecorded(chain), model_outside)

    def _explores_now(self, chain: ChainState) -> bool:
        """A black box's gradient-free fallback outside the box (``grid/field.py``): in
        tuning every iteration that starts outside it, in the draws a fixed share."""
        outside = not (self.has_gradient or chain.frozen or self.grid_ is None
                       or self.grid_.contains(self._q_now))
        return super()._explores_now(chain) or outside

    def _approximate(self, chain: ChainState) -> bool:
        return not self.exact and chain.frozen

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        if not self._approximate(chain):
            return super()._surrogate_step(chain, current, record)
        return self.fit.approximate_transition(current, self._surrogate_field(chain),
                                               self._unrecorded(chain), self.kernel, self.rng)

    def stop_tuning(self):
        first, on_grid = not self.chain.frozen, self.grid_ is not None
        super().stop_tuning()
        if on_grid and first:  # (not where tuning ended before the warm-up did)
            self.fit.tuning_ended(self._access(self.chain), self.exact,
                                  self.refits.suggested_tune())
        if on_grid and not self.exact:
            self.exploration.never_in_draws()  # one target: exp(-U~) everywhere
            self.chain.current = self.chain.current_key = None  # its potential is U~ now

    def _extra_stats(self, chain: ChainState) -> dict:
        return self.fit.potential.stats(chain.current, self._approximate(chain))

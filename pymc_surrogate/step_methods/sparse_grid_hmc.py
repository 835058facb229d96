"""SparseGridHMC: HMC on a grid interpolant precomputed over a domain of interest
(sparse-grid-hmc §3.3-3.5, Algorithms 2-3, §5)."""

from __future__ import annotations

import copy
import time
import warnings

import numpy as np
import scipy.spatial
import scipy.stats
from pymc.blocking import DictToArrayBijection
from pymc.stats.convergence import WarningType
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag, QuadPotentialFull

from pymc_surrogate.core.metropolis import hamiltonian, metropolis_accept
from pymc_surrogate.core.transitions import integrate
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.batch_evaluation import INFINITE, SERIAL, evaluate_logp
from pymc_surrogate.step_methods.corrections import CORRECTIONS
from pymc_surrogate.step_methods.evaluator import infinite_logp_error
from pymc_surrogate.step_methods.model_functions import ModelEvaluationError
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.step_methods.training import TrainingPolicy
from pymc_surrogate.surrogates.base import Domain
from pymc_surrogate.surrogates.whitening import Whitening
from pymc_surrogate.surrogates.sparse_grid import (
    NaiveGrid,
    SmolyakGrid,
    principal_box,
)

__all__ = ["SparseGridHMC", "GridPrecomputeError"]

GRIDS = ("auto", "smolyak", "naive")
#: Seed of the domain search when no ``rng`` is given (see ``SparseGridHMC._seeded``).
DOMAIN_SEED = 20261126
#: Box standard deviations over which a gradient model's field passes from the grid's
#: continuation to the model itself outside the box (a continuous potential).
BLEND_DEPTH = 1.0
#: Black boxes: the draws' share of exact gradient-free exploration steps is the share of
#: late tuning states outside the box, ignored below the first (or below three times the
#: share a right box leaves outside, ``_outside_threshold``) and capped at the second.
OUTSIDE_SHARE = (0.05, 0.9)
#: The share of draws outside the box past which a chain is told (health checkpoints).
MAX_OUTSIDE_DRAWS = 0.2
#: Below this acceptance of grid trajectories in late tuning, a chain is told its grid
#: does not follow the model (measured: a rough potential 0.14-0.16, a banana 0.75).
POOR_MOVE_RATE = 0.3


class GridPrecomputeError(RuntimeError):
    """Model evaluations at grid nodes failed twice; the message lists their coordinates."""


class SparseGridHMC(SurrogateStep):
    r"""HMC on a grid interpolant of the potential, precomputed before sampling.

    The potential ``U = -logp`` is evaluated once at the nodes of a grid over a domain of
    interest (a Smolyak sparse grid, or a full grid for ``d <= 3``), in parallel on any
    ``concurrent.futures.Executor``; the trajectories run on its interpolant inside the
    domain and on the true model outside it (sparse-grid-hmc eq. 3.11). By default every
    draw is accepted with the true logp, so the chain targets the exact posterior. The
    grid is computed in ``__init__`` and shared by every chain (``cores=1`` and
    ``cores>1``).

    Parameters
    ----------
    vars : list of continuous variables, optional (default: all of the model's)
    grid : str or path, optional
        An ``.npz`` file written by ``save_grid`` (or ``NaiveGrid.save`` /
        ``SmolyakGrid.save``): reuse its nodes and values, evaluate nothing.
    save_grid : str or path, optional
        Write the precomputed grid there.
    bounds : (lower, upper), optional
        The domain as an axis-aligned box in the sampler's (unconstrained) space.
    mean, cov : array, optional
        The domain as a box of ``±k`` standard deviations along the principal axes of
        ``cov`` around ``mean``. Default (no ``bounds``, ``mean``/``cov``, ``grid``): a
        Laplace approximation, from the L-BFGS climb and Newton Hessian of the exploration
        (gradient models) or, for black boxes, the value-regression Laplace probe of
        ``explore_steps`` gradient-free exploration steps (the covariance of their second
        half if no probe could be fitted).
    k : float
        Half-width of the box in standard deviations (default 3).
    kind : {"auto", "smolyak", "naive"}
        "auto": the full grid for ``d <= 2``, the sparse grid beyond.
    level : int or "auto"
        Smolyak level (or, for the naive grid, points per dimension); "auto": the finest
        within ``max_nodes``.
    max_nodes : int
        Budget of model evaluations for the grid (default 1000): a finer level raises.
    executor : "auto", "process", "serial", None or an Executor
        Where the node evaluations run. "auto" (default): "process" when the grid would take
        more than ``PARALLEL_AFTER`` seconds (10) in this process, judged from one timed
        logp, else "serial" (starting worker processes costs seconds: a cheap model is
        faster here). "process": a ``ProcessPoolExecutor`` of ``max_workers`` processes
        (spawn), created and shut down here; "serial" or None: in this process; or any
        object with ``submit`` (or ``map``), e.g.
        ``distributed.Client(...).get_executor()``. Remote evaluation pickles the model
        (cloudpickle); a failed node is retried once, then reported with its coordinates.
    max_workers : int, optional
        Processes of the default executor (default: the CPU count).
    progressbar : bool
        Show the precompute's progress.
    exact : bool
        ``True`` (default): every draw is accepted with the true logp. ``False``: the
        paper's GHMC-complete (§5): after tuning, the acceptance uses the interpolated
        energy inside the domain (the true one outside); the draws follow
        ``exp(-U~)``, not the model (a warning, and the stat ``approximate``).
    correction, n_inner
        The exact correction (``SurrogateHMC``): ``"surrogate_transition"`` (default) or
        ``"hamiltonian"``, the paper's Algorithm 3 (one trajectory accepted with the true
        Hamiltonian).
    **kwargs
        Everything ``SurrogateHMC`` takes: ``target_accept``, ``path_length``,
        ``dense_mass``, ``explore_steps``, ``max_energy_error``, ``use_gradient``,
        ``model``, ``rng``.

    Notes
    -----
    sparse-grid-hmc §3.3-3.5, Algorithms 2-3, §5, App. B. The box is rotated to the
    principal axes of the Laplace covariance (the paper's is axis-aligned), whose sds are
    checked by the model's rise at the box's faces. Outside the domain a gradient model's
    trajectories use its exact potential and gradient (counted in ``model_evals``),
    blended in over one box sd so that the potential has no jump at the faces; a black
    box has no gradient there: its trajectories follow the interpolant at the nearest face
    plus the box Gaussian's rise beyond it, and a share of its draws (that of its late
    tuning states outside the box) are exact gradient-free exploration steps. Nodes
    where the logp is -inf or NaN (a truncation or constraint inside the box) are outside
    the support: the interpolant continues the potential there (a quadratic fitted to the
    finite nodes) and the correction rejects what crosses the edge; a node whose
    evaluation *raises* is a failure (retried once, then reported). The
    precompute's cost is in ``precompute_`` (``nodes``, ``model_evals``, ``seconds``,
    ``retried``, ``outside_support``). Stats beyond ``SurrogateHMC``'s: ``approximate``,
    ``in_domain``.

    References
    ----------
    .. [1] Zhang, Shahbaba & Zhao (2017), "Precomputing strategy for Hamiltonian Monte
       Carlo method based on regularity in parameter space", *Computational Statistics*
       32, 253-279.

    Examples
    --------
    >>> step = SparseGridHMC(max_nodes=500, save_grid="grid.npz")  # inside a model context
    >>> idata = pm.sample(step=step, tune=500)
    >>> step = SparseGridHMC(grid="grid.npz")  # later: no model evaluation before sampling
    """

    name = "sparse_grid_hmc"
    # ``_fit_surrogate`` returns the precomputed grid; the evaluations tune records serve
    # the exploration kernel and the skeleton's checks (the spurious-well floor), never a fit.
    policy = TrainingPolicy(source="design", refit="once")
    stats_dtypes_shapes = {
        **_stats.STATS,
        "approximate": (bool, []),
        "in_domain": (bool, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        grid=None,
        save_grid=None,
        bounds=None,
        mean=None,
        cov=None,
        k: float = 3.0,
        kind: str = "auto",
        level: int | str = "auto",
        max_nodes: int = 1000,
        executor="auto",
        max_workers: int | None = None,
        progressbar: bool = True,
        exact: bool = True,
        correction: str = "surrogate_transition",
        n_inner: int = 1,
        **kwargs,
    ):
        if not isinstance(exact, bool | np.bool_):
            raise ValueError(f"exact must be True or False; got {exact!r}.")
        if correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {CORRECTIONS}; got {correction!r}.")
        if not isinstance(n_inner, int | np.integer) or n_inner < 1:
            raise ValueError(f"n_inner must be a positive integer; got {n_inner!r}.")
        if kind not in GRIDS:
            raise ValueError(f"kind must be one of {GRIDS}; got {kind!r}.")
        if not (np.isscalar(k) and np.isfinite(k) and k > 0):
            raise ValueError(f"k must be a positive number of standard deviations; got {k!r}.")
        if not isinstance(max_nodes, int | np.integer) or max_nodes < 1:
            raise ValueError(f"max_nodes must be a positive integer; got {max_nodes!r}.")
        if level != "auto" and (not isinstance(level, int | np.integer) or level < 0):
            raise ValueError(f"level must be a non-negative integer or 'auto'; got {level!r}.")
        if max_workers is not None and (not isinstance(max_workers, int | np.integer) or max_workers < 1):
            raise ValueError(f"max_workers must be None or a positive integer; got {max_workers!r}.")
        if not (executor in SERIAL or executor in ("auto", "process")
                or hasattr(executor, "submit") or hasattr(executor, "map")):
            raise ValueError(
                "executor must be 'auto', 'process', 'serial', None, or an object with submit or map "
                f"(a concurrent.futures.Executor, a Dask client's get_executor()); got {executor!r}."
            )
        given = [name for name, value in (("grid", grid), ("bounds", bounds)) if value is not None]
        if (mean is None) != (cov is None):
            raise ValueError("mean and cov set the domain together: give both or neither.")
        if mean is not None:
            given.append("mean/cov")
        if len(given) > 1:
            raise ValueError(f"give at most one of grid, bounds and mean/cov; got {given}.")
        self.exact = bool(exact)
        self.correction = correction
        self.n_inner = int(n_inner)
        self.k = float(k)
        self.kind = kind
        self.level = level
        self.max_nodes = int(max_nodes)
        self.executor = executor
        self.max_workers = max_workers
        self.progressbar = progressbar
        self.grid_ = None
        self._start_at_centre = grid is None and bounds is None
        if not self.exact:
            kwargs["tail_jumps"] = 0  # every draw is a grid move: no tail jumps
        # The domain search's own seed, drawn from a copy: the sampling stream is untouched.
        given = kwargs.get("rng")
        self._rng_given = (None if given is None else np.random.default_rng(
            copy.deepcopy(given) if isinstance(given, np.random.Generator) else given
        ).integers(2**63))
        super().__init__(vars, **kwargs)
        if self.context.dim:
            warnings.warn(
                "SparseGridHMC in a CompoundStep: the grid interpolates this block's potential "
                "at the other variables' initial values. The draws stay exact (true-logp "
                "correction) but mix poorly when those values move far; sample all continuous "
                "variables with one SparseGridHMC where you can.",
                UserWarning,
                stacklevel=2,
            )
        started = time.perf_counter()
        if grid is not None:
            self.grid_ = _load_grid(grid, self.dim)
            self.precompute_ = {"nodes": self.grid_.n_nodes_, "model_evals": 0, "seconds": 0.0,
                                "retried": 0, "loaded": str(grid)}
        else:
            domain, transform, laplace_evals = self._domain(bounds, mean, cov)
            self.grid_ = self._make_grid(transform)
            try:
                nodes = self.grid_.design(domain)
            except ValueError as err:
                raise ValueError(
                    f"SparseGridHMC: {err} In d = {self.dim} a grid that resolves the "
                    "posterior may need more evaluations than are affordable: lower `level`, "
                    "raise `max_nodes`, or use SurrogateHMC / AdaptiveSurrogateHMC, whose "
                    "cost does not grow with a grid."
                ) from err
            potentials, retried = self._precompute(nodes)
            potentials, outside_support = _fill_outside_support(potentials, nodes)
            self.grid_.fit(nodes, potentials)
            self.precompute_ = {"nodes": int(nodes.shape[0]), "laplace_evals": laplace_evals,
                                "model_evals": int(nodes.shape[0]) + retried + laplace_evals,
                                "seconds": time.perf_counter() - started, "retried": retried,
                                "outside_support": outside_support}
        if save_grid is not None:
            self.precompute_["saved"] = self.grid_.save(save_grid)
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

    # ------------------------------------------------------------ the domain
    def _domain(self, bounds, mean, cov) -> tuple[Domain, object, int]:
        """The box, its transform and the model evaluations spent finding it."""
        if bounds is not None:
            try:
                lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), (self.dim,))
                                for b in bounds)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"bounds must be (lower, upper), each a number or {self.dim} numbers; "
                    f"got {bounds!r}."
                ) from err
            if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
                raise ValueError("bounds must be finite.")
            if np.any(upper <= lower):
                j = int(np.argmax(upper <= lower))
                raise ValueError(
                    f"bounds must have upper > lower in every dimension (a domain of zero "
                    f"width has no grid); dimension {j} has [{lower[j]}, {upper[j]}]."
                )
            return Domain(lower.copy(), upper.copy()), None, 0
        evals = 0
        if mean is None:
            mean, cov, evals = self._seeded(self._laplace)
            cov, checked = self._secant_scales(np.asarray(mean, dtype=np.float64),
                                               np.asarray(cov, dtype=np.float64))
            evals += checked
        mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        cov = np.asarray(cov, dtype=np.float64)
        if mean.shape != (self.dim,) or cov.shape != (self.dim, self.dim):
            raise ValueError(
                f"mean must have shape ({self.dim},) and cov ({self.dim}, {self.dim}); got "
                f"{mean.shape} and {cov.shape}."
            )
        if np.any(np.linalg.eigvalsh(0.5 * (cov + cov.T)) <= 0):
            raise ValueError(
                "cov must be positive definite: a direction of zero variance gives a domain "
                "of zero width."
            )
        domain, transform = principal_box(mean, cov, self.k)
        return domain, transform, evals

    def _seeded(self, search):
        """Run the domain search with a generator of its own.

        The box is chosen in ``__init__``, before ``pm.sample`` seeds the step, so an
        unseeded search made ``pm.sample(random_seed=...)`` irreproducible (and the test
        suite's outcomes machine-dependent: a flat box's search gave a different box each
        construction). Without ``rng=`` the search is seeded by ``DOMAIN_SEED``: the box is a
        function of the model, and the user's seed governs the draws.
        """
        sampling_rng = self.rng
        self.rng = np.random.default_rng(DOMAIN_SEED if self._rng_given is None
                                         else self._rng_given)
        try:
            return search()
        finally:
            self.rng = sampling_rng

    def _laplace(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Mean and covariance from the skeleton's exploration, on a scratch chain.

        Gradient models: the L-BFGS climb and the Newton finite-difference Hessian
        (``exploration.py``; the exploration's probe). Black boxes: ``explore_steps``
        gradient-free steps and their value-regression probe (else the covariance of
        their second half: a random walk's states underestimate the spread, and a box
        from them held 89% of a 3-d Gaussian's draws where the probe's held 99%).
        """
        try:
            return self._search_laplace()
        except ModelEvaluationError as err:
            raise ModelEvaluationError(
                f"{type(self).__name__}: the model failed while the domain of interest was "
                f"searched, before sampling. {err} Fix the model there, or give the domain "
                "yourself (bounds=, or mean= and cov=) where the model works."
            ) from err

    def _search_laplace(self) -> tuple[np.ndarray, np.ndarray, int]:
        chain = self._new_chain()
        start = self._start_point()
        if self.has_gradient:
            current = self._evaluate(chain, start, with_grad=True, record=False)
            current = self._climb_to_mode(chain, self.evaluator.check_start(current))
            probe = chain.explore.probe
            if probe is not None:
                return self._no_worse(probe.mean, current), probe.cov, chain.counts.logp_evals + 1
        current = self.evaluator.check_start(self._evaluate(chain, start, with_grad=False))
        steps = max(self.explore_steps, 20 * self.dim)
        saved_gradient = self.functions.has_gradient
        self.functions.has_gradient = False  # black-box exploration (or a failed Newton)
        try:
            for _ in range(steps):
                info = self._explore_step(chain, current)
                chain.explore_adapt.update(info.adapt_stat, True)
                chain.positions.append(info.point.q)
                chain.iteration += 1
                current = info.point
        finally:
            self.functions.has_gradient = saved_gradient
        probe = chain.explore.probe
        states = np.array(chain.positions[len(chain.positions) // 2:])
        if probe is not None:
            return (self._no_worse(probe.mean, current), _covering(probe.cov, states),
                    chain.counts.logp_evals + 1)
        if len(np.unique(states, axis=0)) > 2 * self.dim:
            cov = np.cov(states, rowvar=False).reshape(self.dim, self.dim)
            if np.all(np.linalg.eigvalsh(cov) > 0):
                return states.mean(axis=0), cov, chain.counts.logp_evals
        raise ValueError(
            f"SparseGridHMC could not find a domain of interest: the climb to the mode and "
            f"{steps} exploration steps gave no usable covariance. Give the domain yourself "
            "(bounds=(lower, upper), or mean= and cov=), or raise explore_steps."
        )

    def _no_worse(self, mean: np.ndarray, reached: ChainPoint) -> np.ndarray:
        """The probe's mean, unless the model finds it less probable than a state the
        exploration reached (then that state): on the banana of sparse-grid-hmc §4.2 the
        Newton step failed at the climb's saddle (beta2 = 0 by symmetry) and the
        value-regression probe of the fallback walk put the mean at beta = (9.2, 7.5),
        logp -5e4 against -226 at the start; the box there held no draw (R-hat 3)."""
        return mean if self._potential(mean) <= reached.potential + 1.0 else reached.q.copy()

    def _potential(self, q: np.ndarray) -> float:
        """``U(q)`` for the domain's checks; inf where the model is not finite or raises
        (the checks then keep what they had; the precompute reports failing nodes)."""
        try:
            with np.errstate(all="ignore"):
                value = -float(self.functions.logp(q))
        except Exception:  # noqa: BLE001 - a check, not a draw
            return np.inf
        return value if np.isfinite(value) else np.inf

    def _secant_scales(self, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
        """The Laplace covariance's scale along each principal axis, measured by the model.

        ``U`` at ``mean +- k sd`` along each axis (2d + 1 evaluations): a Gaussian of that sd
        rises by ``k^2 / 2`` there, the posterior by ``dU``; the secant sd ``k sd /
        sqrt(2 dU)`` is exact for a Gaussian and follows a skewed or curved posterior's
        spread at the box's edge. The black-box probe's covariance is capped by the spread
        of a short random walk (a conjugate regression: sd 0.114 where the posterior's is
        0.24, and a box of +-1.4 posterior sds). Sds only grow, by at most 4x: along axes
        that are not the posterior's principal axes the secant measures a conditional sd,
        smaller than the marginal one, and a box too narrow is what strands a chain outside
        it. A side outside the support (``U`` infinite) says nothing about the spread and is
        left out; an axis along which the posterior has not fallen at ``k`` sd (a rise of
        zero or less: a flat or multimodal potential) grows by the full 4x. A Uniform(0, 1)^2
        whose short random walk gave sds 0.10-0.31 (truth 0.29) kept them, and a box off
        the support's centre stranded CI's chains outside it (ESS 9 in 4000 draws, means
        4 sigma off); an axis with no finite side keeps its sd.
        """
        lam, axes = np.linalg.eigh(0.5 * (cov + cov.T))
        if not np.all(lam > 0):
            return cov, 0
        sd = np.sqrt(lam)
        centre = self._potential(mean)
        if not np.isfinite(centre):
            return cov, 1
        sides = np.array([
            [self._potential(mean + sign * self.k * sd[i] * axes[:, i]) for sign in (-1.0, 1.0)]
            for i in range(self.dim)
        ]) - centre
        ratio = np.ones(self.dim)
        for i, rise in enumerate(sides):
            finite = rise[np.isfinite(rise)]
            if finite.size:
                mean_rise = finite.mean()
                ratio[i] = 4.0 if mean_rise <= 0 else np.clip(
                    self.k / np.sqrt(2.0 * mean_rise), 1.0, 4.0)
        scaled = axes * (sd * ratio)
        return scaled @ scaled.T, 1 + 2 * self.dim

    def _start_point(self) -> np.ndarray:
        point = self._model.initial_point()
        return DictToArrayBijection.map({v.name: point[v.name] for v in self.vars}).data.astype(np.float64)

    def _make_grid(self, transform):
        kind = self.kind
        if kind == "auto":
            kind = "naive" if self.dim <= 2 else "smolyak"
        if kind == "naive":
            return NaiveGrid(points_per_dim=self.level, max_nodes=self.max_nodes, transform=transform)
        return SmolyakGrid(level=self.level, max_nodes=self.max_nodes, transform=transform)

    def _box_gaussian(self) -> None:
        """The box's Gaussian (centre, ``±k`` sd along its edges): the first metric, the
        frame of the mass matrices, and the continuation's rise outside the box."""
        grid = self.grid_
        lower, upper = grid.domain_
        self._box_lower, self._box_upper = lower, upper
        self._box_sd = (upper - lower) / (2.0 * self.k)
        axes = np.eye(self.dim) if grid.transform is None else grid.transform.axes
        middle = 0.5 * (lower + upper)
        self.box_mean_ = middle if grid.transform is None else grid.transform.from_box(middle)
        self._box_axes = axes * self._box_sd  # q = box_mean_ + _box_axes @ (unit-sd coordinates)
        self.box_cov_ = self._box_axes @ self._box_axes.T

    # ------------------------------------------------------------ the precompute
    def _precompute(self, nodes: np.ndarray) -> tuple[np.ndarray, int]:
        """``U`` at every node, through the executor; each failed node retried once."""
        n = nodes.shape[0]
        batch = evaluate_logp(nodes, self.functions, self._model, self.vars,
                              executor=self.executor, max_workers=self.max_workers,
                              progressbar=self.progressbar, label="Grid nodes",
                              owner=type(self).__name__)
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
                "(bounds=, mean=/cov=, or a smaller k) to where its logp is finite."
            )
        return -batch.logp, batch.retried

    # ------------------------------------------------------------ the chain
    def _new_chain(self) -> ChainState:
        chain = super()._new_chain()
        if getattr(self, "grid_", None) is None or not hasattr(self, "box_cov_"):
            return chain  # the scratch chain that finds the domain
        rng = self.rng.spawn(1)[0]
        if self.dense_mass is False:
            chain.metric = QuadPotentialDiag(np.diag(self.box_cov_).copy(), rng=rng)
        else:
            chain.metric = QuadPotentialFull(self.box_cov_.copy(), rng=rng)
        self._use_surrogate(chain, self.grid_)
        # The metric and step size re-adapt on the grid at the skeleton's refit times,
        # from iteration 52 on (the first needs tuning states for the chain's scale).
        chain.fits.last_iteration = 1
        return chain

    def _fit_surrogate(self, chain: ChainState, **settings):
        """A designed surrogate is fitted once, before sampling: refits only re-adapt the
        metric and step size on it."""
        return self.grid_

    def _posterior_scale(self, chain: ChainState, dense: bool) -> Whitening:
        """The box's Gaussian (the Laplace approximation, checked by the model) until tuning
        has ``5 d`` distinct late states (at least 20) to estimate the scale from (d = 20 with
        tune = 3 re-adapted the metric on a handful of states: sd z-scores down to -7.7),
        then the states' covariance."""
        states = self._late_tuning_states(chain)[0]
        box = self._scale_frame()
        if len(np.unique(states, axis=0)) >= max(20, 5 * self.dim):
            return Whitening.from_samples(states, dense=dense, frame=box)
        return box if dense else Whitening(box.mean, np.sqrt(np.diag(self.box_cov_)))

    def _scale_frame(self) -> Whitening:
        """The box's Gaussian: mass matrices are estimated relative to it (a ridge
        regression's sd of 3.5e-5 drowned in an absolute regulariser: step size 2e-3,
        256 leapfrog steps a draw, ESS 5)."""
        return Whitening(self.box_mean_, np.linalg.cholesky(self.box_cov_))

    def _dense_chain_scale(self, chain: ChainState) -> bool:
        """``dense_mass="auto"``: dense when the box's Gaussian is strongly correlated (the
        skeleton asks the chain's exploration probe, which a grid's chain never makes:
        a ridge regression, correlation -0.99999, then got a diagonal metric, ESS 5)."""
        if self.dense_mass != "auto":
            return bool(self.dense_mass)
        scale = np.sqrt(np.diag(self.box_cov_))
        eigs = np.linalg.eigvalsh(self.box_cov_ / np.outer(scale, scale))
        return bool(eigs.min() * self.tuning.dense_scale_margin < eigs.max())

    def _warm_up(self, chain, chain_scale, field, initial_step, n_samples=0):
        # The step size and metric are tuned on the grid alone: its continuation outside
        # the box, never the model (an adjoint PDE's warm-up otherwise spent thousands of
        # solves on trajectories that leave the box).
        return super()._warm_up(chain, chain_scale,
                                self._surrogate_field(chain, model_outside=False),
                                initial_step, n_samples)

    def _measures_coverage(self) -> bool:
        # Its field is the interpolant inside the box and the model outside: a temperature
        # would break it at the faces. Its coverage is the box's (``_outside_share``).
        return False

    def _surrogate_field(self, chain: ChainState, model_outside: bool = True):
        """eq. 3.11: the interpolant inside the domain, the true model outside (a black box,
        or ``model_outside=False``: the grid's continuation, ``_continuation``)."""
        grid = chain.surrogate
        if self.has_gradient and model_outside:
            def outside(q):
                return self._blend_to_model(chain, q)
        else:
            outside = self._continuation

        def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
            if grid.contains(q):
                return grid.value_and_grad(q)
            return outside(q)

        return value_and_grad

    def _blend_to_model(self, chain: ChainState, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Outside the box, a gradient model's own potential, reached smoothly.

        The interpolant and the model differ at the box's faces by the interpolation error;
        switching from one to the other there puts a jump in the potential that no step
        size integrates (pde d = 20 with its adjoint: trajectories crossing the faces drove
        the step size to 5e-4 and the chains out of the box, 256 model gradients a tuning
        iteration for 600 iterations). Within ``BLEND_DEPTH`` box standard deviations of
        the box the field blends from the face's continuation to the model (smoothstep
        weight), so the potential is continuous; beyond, it is the model's.
        """
        point = self._evaluate(chain, q, with_grad=True, record=False)
        transform = self.grid_.transform
        u = q if transform is None else transform.to_box(q)
        out = (u - np.clip(u, self._box_lower, self._box_upper)) / self._box_sd
        depth = float(np.sqrt(out @ out)) / BLEND_DEPTH
        if depth >= 1.0 or not np.isfinite(point.potential):
            return point.potential, point.grad
        value, grad = self._continuation(q)
        weight, slope = depth * depth * (3.0 - 2.0 * depth), 6.0 * depth * (1.0 - depth)
        gap = point.potential - value
        grad_depth_u = out / (self._box_sd * max(depth, 1e-300) * BLEND_DEPTH**2)
        grad_depth = grad_depth_u if transform is None else transform.gradient_from_box(grad_depth_u)
        return (value + weight * gap,
                grad + weight * (point.grad - grad) + slope * gap * grad_depth)

    def _centre_is_higher(self, q: np.ndarray) -> bool:
        centre = self._potential(self.box_mean_)
        return bool(np.isfinite(centre) and centre < self._potential(q))

    def _continuation(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Outside the box: the interpolant at the nearest face point plus the box
        Gaussian's rise beyond the face, ``k |o| + o^2 / 2`` per box sd ``o`` out.

        A continuous potential with its exact gradient: along the face, the interpolant's
        own slope; outward, the Gaussian's. (The face's linear extension, ``U~(face) +
        grad U~(face) . (q - face)``, jumps wherever the face point crosses a grid cell, by
        the change of gradient times the distance out: the warm-up's chain on the
        banana's far arm drove the step size to 5e-5 and 250 model gradients a draw.)
        """
        grid = self.grid_
        transform = grid.transform
        u = q if transform is None else transform.to_box(q)
        face = np.clip(u, self._box_lower, self._box_upper)
        q_face = face if transform is None else transform.from_box(face)
        value, grad = grid.value_and_grad(q_face)
        out = (u - face) / self._box_sd
        grad_u = grad if transform is None else grad @ transform.axes
        grad_u = np.where(out == 0.0, grad_u, (self.k + np.abs(out)) * np.sign(out) / self._box_sd)
        grad_q = grad_u if transform is None else transform.gradient_from_box(grad_u)
        return value + float(np.sum(self.k * np.abs(out) + 0.5 * out * out)), grad_q

    # ------------------------------------------------------- GHMC-complete (exact=False)
    def _approximate(self, chain: ChainState) -> bool:
        return not self.exact and chain.frozen

    def _grid_potential(self, chain: ChainState, q: np.ndarray,
                        field_value: float | None = None) -> float:
        """GHMC-complete's potential: the interpolant inside, the true one outside."""
        if self.grid_.contains(q):
            return self.grid_.value_and_grad(q)[0]
        if self.has_gradient and field_value is not None:
            return field_value  # the field outside: the model, blended in near the faces
        return self._evaluate(chain, q, with_grad=False, record=False).potential

    def _explores_now(self, chain: ChainState) -> bool:
        """A black box's gradient-free fallback outside the box (issue 20's "outside the
        domain").

        Outside the box a black box has no model of its potential: the interpolant's
        continuation pulls trajectories back at the box's scale, whatever the posterior
        does there (a box of +-0.4 sd: draws with sd 0.69 of the posterior's). In tuning,
        every iteration that starts outside the box is an exploration step (DE-MCz on the
        true model); in the draws, a fixed share of iterations is (the share of late tuning
        states outside the box, ``OUTSIDE_SHARE``): a mixture of two exact kernels whose
        weights do not depend on the state, so the chain stays exact.
        """
        if self.has_gradient or self._approximate(chain) or chain.frozen:
            return super()._explores_now(chain)
        return super()._explores_now(chain) or not self.grid_.contains(self._q_now)

    def _outside_threshold(self) -> float:
        """The late tuning share outside the box that calls for exploration in the draws.

        A box of ``+-k`` sd around the right Gaussian leaves ``1 - (1 - 2 Phi(-k))^d`` of
        it outside: 0.8% in d = 3, 2.7% in d = 10 at k = 3. The former 2% threshold sat
        below that from d = 8 on, and in d = 3 autocorrelated tuning states passed it by
        chance (a 3-d Gaussian black box whose box held 99.3% of the draws, as a right
        box does, ran 1.6% of them on DE-MCz). Boxes too small to trust leave far more
        outside (a box of +-0.4 sd: 70% and more; the funnel 23-45%).
        """
        right_box = 1.0 - (1.0 - 2.0 * scipy.stats.norm.sf(self.k)) ** self.dim
        return max(OUTSIDE_SHARE[0], 3.0 * right_box)

    def _outside_share(self, chain: ChainState) -> float:
        """The share of the late tuning states outside the box."""
        states = self._late_tuning_states(chain)[0]
        if len(states) == 0:
            return 0.0
        return float(np.mean([not self.grid_.contains(q) for q in states]))

    def _watch_draw(self, chain: ChainState, info: TransitionInfo, fallback: bool,
                    surrogate: bool) -> None:
        """The skeleton's chain health, and how much of the chain lies outside the box, at
        the same checkpoints (draws 100, 200, 400, ...).

        Tuning can miss it: on the 2-d funnel the late tuning states were 3-9% outside the
        box and the draws 23-45%, with v's sd 0.75 of the truth's in one chain and nothing
        said. Outside the box the grid is no model of the posterior.
        """
        super()._watch_draw(chain, info, fallback, surrogate)
        record = chain.health
        if record.draws * 2 != record.next_check:  # not a checkpoint
            return
        outside = float(np.mean([not self.grid_.contains(q) for q in record.positions]))
        if outside > MAX_OUTSIDE_DRAWS:
            self._tell(
                chain, "outside_box",
                f"{outside:.0%} of {self._chain_name()}'s first {record.draws} draws lie outside "
                "the grid's box, where the grid is no model of the posterior (a funnel, heavy "
                "tails, a box from a poor Laplace approximation): the draws are exact but mix "
                "poorly; check R-hat and ESS. Widen the box (a larger k, or bounds= / mean= "
                f"and cov=), or sample this model with SurrogateHMC.",
            )

    def _move_rate_in_box(self, chain: ChainState) -> float | None:
        """How often the late tuning iterations that started inside the box moved the
        chain (the corrected grid trajectories' acceptance); None if fewer than 20 did."""
        states = self._late_tuning_states(chain)[0]
        starts = [i for i in range(1, len(states)) if self.grid_.contains(states[i - 1])]
        if len(starts) < 20:
            return None
        return float(np.mean([np.any(states[i] != states[i - 1]) for i in starts]))

    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        self._q_now = q
        if (self.tune and chain.iteration == 0 and self._start_at_centre
                and not self.grid_.contains(q) and self._centre_is_higher(q)):
            # Tuning starts at the Laplace mean (a mode estimate), as the skeleton's climb
            # to the mode does: from PyMC's initial point far outside the box a black box's
            # chain crawled on the continuation (conjugate regression: step size 1e-4,
            # never in the box in 1800 iterations). Not for a box given as bounds (its
            # centre need not be near the posterior), nor when the model says the centre
            # is less probable than the start (a banana's probe put it at beta = (9, 7.5),
            # where chains that started crawled: R-hat 3).
            q = self.box_mean_.copy()
        if not self._approximate(chain):
            return super()._current_point(chain, q)
        if chain.current is not None and chain.current_key == self.evaluator.key(q):
            return chain.current
        return ChainPoint(q, self._grid_potential(chain, q), None)

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        if not self._approximate(chain):
            return super()._surrogate_step(chain, current, record)
        field = self._surrogate_field(chain)
        value, grad = field(current.q)
        end, kinetic0, kinetic1, eps = integrate(
            current.q, value, grad, field, chain.metric, chain.step_adapt.current(False),
            self.path_length, self.max_energy_error, self.rng,
        )
        h0 = hamiltonian(current.potential, kinetic0)
        if not end.finite:
            return TransitionInfo(point=current, accepted=False, accept_prob=0.0,
                                  adapt_stat=0.0, diverging=True, energy=h0,
                                  energy_error=np.inf, n_steps=end.n_steps, step_size=eps)
        potential = self._grid_potential(chain, end.q, end.potential)
        error = hamiltonian(potential, kinetic1) - h0
        error = np.inf if np.isnan(error) else error
        accepted, prob = metropolis_accept(-error, rng=self.rng)
        point = ChainPoint(end.q, potential, None) if accepted else current
        return TransitionInfo(
            point=point, accepted=accepted, accept_prob=prob, adapt_stat=prob,
            diverging=error > self.max_energy_error,
            energy=hamiltonian(potential, kinetic1) if accepted else h0, energy_error=error,
            surrogate_energy_error=error, n_steps=end.n_steps, step_size=eps,
        )

    def stop_tuning(self):
        chain = self.chain
        first = not chain.frozen
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
                f"poorly. Increase `tune` (to at least {self._suggested_tune()}).",
            )
        high = OUTSIDE_SHARE[1]
        if self.exact and share > self._outside_threshold() and chain.explore.probability == 0.0:
            chain.explore.probability = min(share, high)
            chain.explore.history = self._explore_history(chain)
            if share > 0.2:
                self._warn(
                    chain, WarningType.BAD_PARAMS,
                    f"{share:.0%} of a chain's late tuning states lie outside the grid's box, "
                    f"where a black box has no model of the posterior: "
                    f"{chain.explore.probability:.0%} of its draws use the exact gradient-free "
                    "exploration kernel (stat `fallback`), which is correct but mixes slowly. "
                    "Widen the box (a larger k, or bounds= / mean= and cov= that cover the "
                    "posterior).",
                )
        if not self.exact:
            self.chain.explore.probability = 0.0  # one target: exp(-U~) everywhere
            self.chain.current = self.chain.current_key = None  # its potential is U~ now

    def _choose_draw_length(self, chain: ChainState, tuned: float) -> None:
        if self.exact:
            super()._choose_draw_length(chain, tuned)

    def _extra_stats(self, chain: ChainState) -> dict:
        point = chain.current
        inside = point is not None and self.grid_.contains(point.q)
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


def _covering(cov: np.ndarray, states: np.ndarray) -> np.ndarray:
    """``cov``, widened along every direction in which the ``states`` spread further.

    A black box's value-regression probe fits a quadratic to noisy or rough values: on a
    potential rough at the 1e-4 scale it gave sds 0.2 and 0.12 where the posterior's are
    1, and the chains lived outside the box. The exploration's own states bound the
    spread from below. In ``cov``'s whitened frame, the states' covariance's eigenvalues
    below 1 are raised to 1: the result is at least both.
    """
    dim = cov.shape[0]
    if len(np.unique(states, axis=0)) <= 2 * dim:
        return cov
    factor = np.linalg.cholesky(cov)
    white = np.linalg.solve(factor, (states - states.mean(axis=0)).T)
    lam, vecs = np.linalg.eigh(np.cov(white).reshape(dim, dim))
    widened = factor @ vecs * np.sqrt(np.maximum(lam, 1.0))
    return widened @ widened.T


def _fill_outside_support(potentials: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, int]:
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
            "nodes: the domain misses the posterior. Give it yourself (bounds=, or mean= and "
            "cov=) where the logp is finite."
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


def _load_grid(path, dim: int):
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

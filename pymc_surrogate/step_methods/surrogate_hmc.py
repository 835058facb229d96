"""SurrogateHMC: HMC on a random-network surrogate (rns-hmc §3, Algorithms 2-3)."""

from __future__ import annotations

from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.kernels.riemannian import (
    RIEMANNIAN_STATS,
    RiemannianKernel,
    riemannian_stats,
)
from pymc_surrogate.step_methods.settings import HMCKernel
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["SurrogateHMC"]


class SurrogateHMC(SurrogateStep):
    r"""Hamiltonian Monte Carlo on a random-network surrogate, exactly corrected.

    Tuning explores exactly (HMC, or DE-MCz without gradients) and fits a random network
    to every evaluation; without gradients its surrogate steps then run on the tempered
    surrogate ``U~ / T``, so that the fit learns where it is too high. The draws run on the
    frozen surrogate, one model logp each; without gradients on ``U~`` lowered by ``5 sd``
    (at most ``sqrt(2 d)`` nats), ``sd`` the predictive sd of a quadratic fit to the same
    data, so that where the data thin out the surrogate is not left above the potential,
    where a chain would stick.

    Parameters
    ----------
    vars : list of continuous variables, optional (default: all of the model's)
    surrogate : RandomNetworkSurrogate, optional
        The random network fitted to the model's values and gradients, with its settings
        (hidden nodes, activation, quadratic base, ridge penalty, sizes): e.g.
        ``surrogate=RandomNetworkSurrogate(n_hidden=200)``. Its defaults by default. Each
        fit is a new copy in the chain's whitened coordinates; the step also sets its
        ``random_state`` and ``max_training_error``.
    kernel : HMCKernel, optional
        The trajectories on the surrogate and their correction with the true logp
        (``correction``, ``n_inner``, ``path_length``, ``max_energy_error``, ``dense_mass``,
        the Riemannian ``metric``, RNS-RMHMC of rns-hmc §3.4, and the draws' heavy-tailed
        ``tail_jumps``): e.g.
        ``kernel=HMCKernel(n_inner=3)``. Default ``HMCKernel()``: surrogate transitions
        with ``n_inner="auto"``. With ``metric="riemannian"`` the stats
        ``riemannian``, ``fixed_point_iterations`` (Newton iterations of the implicit
        half-steps, per leapfrog step) and ``implicit_failures`` (inner moves ended by an
        implicit step that did not converge: divergences, never accepted) say how the
        moves went.
    warmup : WarmUp, optional
        The exact exploration before the first fit: ``steps`` iterations (60 with
        gradients, ``max(300, 30 d)`` without, by default) counted over every chain that
        shares the store, and with an ``executor`` the ``tries`` proposals evaluated at
        once.
    frame : {"auto", "affine", "triangular"} or TriangularMap
        The coordinates the surrogate is fitted and the trajectories run in. "affine": the
        model's own, whitened by the posterior scale. "triangular": the reference coordinates ``z`` of a lower-triangular transport map ``q = T(z)``
        fitted to the chain's tuning states at each refit and frozen for the draws
        (``TriangularMap``, or one given with its settings), in which a curved or
        scale-varying posterior looks close to ``N(0, I)``; the correction uses the true
        target in ``z``, ``pi(T(z)) |det J_T(z)|``, so the draws ``T(z)`` stay exact.
        Where the map's held-out capacity choice finds nothing nonlinear, or the states'
        potentials are no closer to quadratic in its coordinates, it is the affine frame.
        Needs the whole model, the Euclidean metric and no executor. "auto" (default):
        "triangular" where the step samples the whole model one evaluation at a time on
        the Euclidean metric, else "affine" (stat ``frame_degree``: 0 in the affine frame).
    target_accept : float
        Step-size target of HMC on the surrogate alone (default 0.8).
    store : None, path, EvaluationStore or False
        Where every model evaluation goes, from every chain. ``None`` (default): a
        temporary store shared by the chains that run in this process (``cores=1``): in
        tuning each chain fits on all their evaluations and its first fit waits for
        ``explore_steps`` exploration iterations of them together (a quarter from its
        own start); after tuning each chain freezes its own surrogate, so the draws stay
        exact. Chains in other processes (``cores > 1``) each get their own, so that
        ``random_seed`` fixes every draw. ``EvaluationStore()``: one temporary store for
        the chains of every process, which then read each other's evaluations as they
        come (the draws depend on the processes' timing). A path (an SQLite file, shared
        by every process): kept after the run, a kill included; a later run given it fits
        at its first tuning iteration, and when it holds a finished run's tuning, tunes on
        the surrogate alone, evaluating the model only every 20th tuning iteration to
        check the surrogate where the chain went (about 50 evaluations in 1000; exact
        tuning again where the checks find it poor); it refuses another model's file. ``False``: each chain learns alone.
    executor : None or a concurrent.futures.Executor
        Black-box models: where exploration evaluates the model. ``None`` (default): one
        call at a time. An executor (``distributed.Client(...).get_executor()``, a
        ``ThreadPoolExecutor`` for a model served over HTTP, a ``ProcessPoolExecutor``):
        each exploration iteration is a multiple-try Metropolis step (Liu, Liang & Wong
        2000) whose ``tries`` proposals (``WarmUp``), then ``tries - 1`` reference
        points, are evaluated at once; exact, and the warm-up's ``steps`` count its model
        calls, so the first fit comes ``(2 tries - 1) / 2`` times sooner in wall-clock.
        After it, tuning moves on the surrogate alone and evaluates the chain's last
        ``tries`` states at once every 20 iterations (exact tuning where those
        checks find the surrogate poor). Workers compile the whole model: the step must sample all of it. The executor
        stays in this process: with ``cores > 1`` the chains explore one call at a time
        (and say so).
    use_gradient : "auto", True or False
        "auto" (default): the model's gradient where it has one; ``False`` treats the
        model as a black box (logp only); ``True`` requires the gradient.
    model : pm.Model, optional
        Default: the model in context.
    rng : numpy.random.Generator or int, optional
        ``pm.sample`` sets one per chain from its ``random_seed``.
    initial_point : dict, optional
        A point of the model (``model.initial_point()`` by default) that fixes the
        variables' shapes; ``pm.sample`` passes it when it builds steps itself.
    compile_kwargs : dict, optional
        Passed to PyTensor when the model's logp (and gradient) are compiled, e.g.
        ``{"mode": "CVM"}`` for a black-box Op that PyTensor 3's default Numba backend
        would run in object mode.
    blocked : bool, default True
        As PyMC's step methods: ``False`` with several ``vars`` makes one step (and one
        surrogate) per variable, combined in a ``CompoundStep``.

    Notes
    -----
    rns-hmc §3, Algorithms 2-3; the surrogate transition is Liu (2001) §9.4. Stats:
    ``docs/usage.md``; the fallback and the reasons for each default: ``docs/design.md``.

    References
    ----------
    .. [1] Zhang, Shahbaba & Zhao (2017), "Hamiltonian Monte Carlo acceleration using
       surrogate functions with random bases", *Statistics and Computing* 27.
    .. [2] Liu (2001), *Monte Carlo Strategies in Scientific Computing*, §9.4.

    Examples
    --------
    >>> idata = pm.sample(step=SurrogateHMC(), tune=1000)  # inside a model context
    """

    name = "surrogate_hmc"
    surrogate_family = (RandomNetworkSurrogate,)
    stats_dtypes_shapes = {**_stats.STATS, **RIEMANNIAN_STATS}

    default_kernel = HMCKernel()

    def __init__(self, vars=None, **kwargs):
        super().__init__(vars, **kwargs)
        kernel = self.kernel_settings
        if self.frame.learned and kernel.metric != "euclidean":
            raise ValueError("SurrogateHMC: frame='triangular' runs Euclidean trajectories "
                             "only (HMCKernel(metric='euclidean')).")
        if kernel.metric != "euclidean":
            self.riemannian = RiemannianKernel(kernel.metric, kernel.softabs_alpha, self.tuning)
            self.riemannian.check(self.context.dim)

    riemannian = None  # the Riemannian moves (``HMCKernel(metric="riemannian")``)

    def check_kernel(self, kernel: HMCKernel) -> None:
        """Every metric runs here (``kernels/riemannian.py``)."""

    @property
    def lowers_black_box_draws(self) -> bool:
        """Euclidean draws only (draw_bound.py): the Riemannian moves run on the
        surrogate's own derivatives (``RiemannianKernel.field``)."""
        return self.kernel_settings.metric == "euclidean"

    def _surrogate_step(self, chain, current, record: bool = True):
        if self.riemannian is None:
            return super()._surrogate_step(chain, current, record)
        tuning_now = self._tuning_now(chain)
        field = self.riemannian.field(self.learned.surrogate, self.coverage.temperature_now(tuning_now))
        current, evaluate = self._model_or_surrogate(
            chain, current, self.has_gradient and not chain.frozen, record, field)
        return self.riemannian.transition(
            current, evaluate, field, self.kernel.step_adapt.current(tuning_now),
            self.kernel.path_length, self.kernel.inner(), self._whitened(chain),
            self.kernel.max_energy_error, self.rng,
        )

    def _adapted_to_surrogate(self, chain, chain_scale) -> None:
        """RNS-RMHMC: the Riemannian moves' step size, on the surrogate alone."""
        if self.riemannian is None:
            return
        start = chain.current.q if chain.current is not None else chain_scale.mean
        step = self.riemannian.warm_up(
            self.riemannian.field(self.learned.surrogate, self.coverage.temperature),
            self._whitened(chain), start,
            self.kernel.step_size_adaptation(self.kernel.step_adapt.current(False)),
            self.kernel.path_length, self.kernel.max_energy_error, self.rng,
        )
        self.kernel.use(step_size=step)

    def _whitened(self, chain) -> Whitening:
        """The chain's whitened coordinates: the posterior scale of the last fit."""
        whitening = self.learned.whitening
        return whitening if whitening is not None else Whitening.identity(self.dim)

    def _extra_stats(self, chain) -> dict:
        return {**super()._extra_stats(chain), **riemannian_stats(self.riemannian)}

    def _surrogate_fit(self) -> SurrogateFit:
        # After a spurious well: refit with the ridge penalty floored at these fractions of
        # its scale (cross-validation alone may take 1e-12).
        return SurrogateFit(
            self.surrogate, self.learned, self.policy, self.context, self.dim, self.has_gradient,
            settings={"max_training_error": self.tuning.max_training_error},
            tamer_settings=({"min_alpha": 1e-6}, {"min_alpha": 1e-3}),
        )

"""Exact kernels before a surrogate exists, and when a surrogate stalls.

Exploration is exact HMC on the true model when it has a gradient (every leapfrog point is
training data), else a differential-evolution random walk (DE-MCz). The same kernel is the
fallback while a stuck surrogate is set aside in tune, and a fixed share of the draws of a
chain whose surrogate stalled (a mixture of two exact kernels).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.optimize
from pymc.stats.convergence import WarningType
from pymc.step_methods.hmc.quadpotential import QuadPotentialFullAdapt

from pymc_surrogate.core.transitions import (
    differential_evolution_jump,
    differential_evolution_transition,
    exact_hmc_transition,
    multiple_try_transition,
)
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.batch_evaluation import _NodeLogp, evaluate_logp
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.laplace import laplace_at, laplace_from_values

__all__ = ["Exploration"]

#: Tuning updates of DE-MCz's scale factor before the draws use its averaged value.
MIN_SCALE_UPDATES = 50
#: Nats of Laplace mass by which an earlier iterate of the start-of-tune climb must beat a
#: later one to replace it: a factor e in mass, far below a neck's loss (eight schools: 37
#: nats) and above the wobble of a converged climb's last iterates (logistic d = 20: 0.01).
MASS_MARGIN = 1.0


class Exploration:
    """Mixin of ``SurrogateStep``: the exploration kernels and the stall fallback."""

    def _default_explore_steps(self) -> int:
        # Exact HMC gathers d+1 equations at every leapfrog point, so a short run gives
        # a good fit; a random walk gives one equation a step and mixes slowly.
        if self.functions.has_gradient:
            return 60
        return int(max(300, 30 * self.dim))

    def _surrogate_stuck(self, chain: ChainState) -> bool:
        # Pseudo-marginal: rejection runs of 50-130 are the noise's, an ideal sampler's too
        # (var log L^ about 1.5); the fallback then spent 25% of the draws on a random walk.
        if self.pseudo_marginal:
            return False
        moves = chain.explore.recent_moves
        return len(moves) >= self.tuning.stuck_window and np.mean(moves) < self.tuning.stuck_acceptance

    def _explores_now(self, chain: ChainState) -> bool:
        if chain.surrogate is None:
            return True
        if not chain.frozen:
            return chain.explore.paused
        return chain.explore.probability > 0 and self.rng.uniform() < chain.explore.probability

    def _explore_step(self, chain: ChainState, current: ChainPoint) -> TransitionInfo:
        """Exact kernels used before a surrogate exists: HMC, or DE-MCz without gradients."""
        if self.has_gradient:
            if current.grad is None:
                current = self.evaluator.check_start(  # the chain's state: no rejection
                    self._evaluate(chain, current.q, with_grad=True, retry=True))
            if chain.iteration == 0 and self.tune and self.tuning.start_at_mode:
                current = self._climb_to_mode(chain, current)
            metric, step_adapt = self._exact_kernel(chain)
            return exact_hmc_transition(
                current,
                lambda q: self._evaluate(chain, q, with_grad=True),
                metric,
                step_adapt.current(self.tune and not chain.frozen),
                min(self.path_length, self.tuning.explore_path_length),
                self.max_energy_error,
                self.rng,
                max_steps=self.tuning.explore_max_steps,
            )
        if self.tune and not chain.frozen:
            current = self._update_probe(chain, current)
        if self._executor_left_behind and chain.iteration == 0:
            self._warn(
                chain, WarningType.BAD_PARAMS,
                "the executor stayed in the parent process (it does not travel to PyMC's "
                "worker processes), so this chain explores one model call at a time. "
                "Sample with cores=1 to explore in batches on the executor.",
            )
        history = chain.explore.history
        if history is None:
            history = self._explore_history(chain)
        scale = self._explore_scale(chain)
        # Draws of the probe span every direction: no isotropic steps needed.
        isotropic_share = 0.0 if chain.explore.probe is not None else 1.0 / 3.0
        if self._batched_exploration:
            return multiple_try_transition(
                current, lambda points: self._evaluate_batch(chain, points),
                lambda rng: differential_evolution_jump(history, scale, self.dim, rng,
                                                        isotropic_share),
                self.explore_tries, self.rng, step_size=scale,
            )
        return differential_evolution_transition(
            current, lambda q: self._evaluate(chain, q, with_grad=False), history, scale,
            self.rng, isotropic_share=isotropic_share,
        )

    def _exact_kernel(self, chain: ChainState):
        """Exact HMC's mass matrix and step-size adaptation: the chain's own before the
        first fit, then the ones exploration had adapted, which the fallback goes on with.

        The fallback once ran on the surrogate's: after a first fit in a funnel's neck
        (centred eight schools) the surrogate trajectories' step size fell to 1e-7 - 1e-9
        by dual averaging on their rejections, and its metric was the chain's late
        tuning states; exact HMC at that step size accepted every move (energy error
        1e-13) without moving, its states shrank the next fit's metric, and all four
        chains kept one value of tau from tuning iteration 100 to the last draw.

        Returns
        -------
        metric : QuadPotential
        step_adapt : DualAverageAdaptation
        """
        if chain.exact_metric is None:
            return chain.metric, chain.step_adapt
        return chain.exact_metric, chain.exact_step_adapt

    @property
    def _batched_exploration(self) -> bool:
        """Black-box exploration on an executor: multiple-try Metropolis, its tries at once."""
        return self.explore_executor is not None and not self.has_gradient

    def _exploration_units(self) -> int:
        """What an exploration iteration counts toward ``explore_steps``: its model calls
        when batched (``2 explore_tries - 1``: as many points to learn from as that many
        serial steps), else 1."""
        return 2 * self.explore_tries - 1 if self._batched_exploration else 1

    def _evaluate_batch(self, chain: ChainState, points: np.ndarray) -> list[ChainPoint]:
        """The true potential at each row of ``points``, evaluated at once on
        ``explore_executor`` (``batch_evaluation.py``), counted and kept as ``_evaluate``
        keeps one."""
        points = np.array([self.functions.representable(q) for q in points])
        result = evaluate_logp(points, self.functions, self._model, self.vars,
                               executor=self.explore_executor, progressbar=False,
                               owner=type(self).__name__, node_logp=self._node_logp())
        chain.counts.logp_evals += points.shape[0]
        # A row that failed twice, NaN or +inf: a rejection there (evaluator.py)
        out = self.evaluator.from_batch(chain, points, result.logp, result.errors, self.tune)
        for point in out:
            self._keep(chain, point)
        return out

    def _node_logp(self):
        """The model as workers compile it, pickled once per step (not per batch)."""
        if self._node_logp_cache is None:
            self._node_logp_cache = _NodeLogp.from_model(self._model, self.vars,
                                                         type(self).__name__)
        return self._node_logp_cache

    def _explore_target(self) -> float:
        """The acceptance DE-MCz's scale is dual-averaged toward: 0.3, or 0.07 with a noisy
        logp, the optimum of a pseudo-marginal random walk (Sherlock, Thiery, Roberts &
        Rosenthal 2015, Ann. Statist. 43: acceptance about 0.07 at var log L^ about 3.3).
        At var log L^ 1.58 the noise alone accepted a move of size zero 38% of the
        time, so 0.3 drove the scale to its 0.01 floor, the tuning states to a sliver
        (sd 0.01 against 0.4-0.7) and the chain's fit with them (R-hat up to 1.23)."""
        return 0.07 if self.pseudo_marginal else 0.3

    def _explore_scale(self, chain: ChainState) -> float:
        """DE-MCz's scale factor: dual averaging's, or 1 (DE-MCz's optimum for a Gaussian)
        in draws after fewer than ``MIN_SCALE_UPDATES`` tuning updates.

        Dual averaging is built for HMC step sizes and overshoots early (it starts at
        ``mu = log(10 x initial)``); a random walk's factor never needs to leave [0.01, 3].
        Its average after three tuning iterations was 2.67: on N(0, I), d = 20, with
        ``tune=3``, every one of 300 fallback draws was rejected (a constant chain).
        """
        tuning = self.tune and not chain.frozen
        if not tuning and chain.explore.adapted < MIN_SCALE_UPDATES:
            return 1.0
        return float(np.clip(chain.explore_adapt.current(tuning), 0.01, 3.0))

    def _update_probe(self, chain: ChainState, current: ChainPoint) -> ChainPoint:
        """Refit the black-box exploration's Laplace probe; return where tuning goes on.

        Every ``max(10, d)`` new evaluations, a quadratic is fitted to the lowest
        potentials evaluated so far (``surrogates/laplace.py``); its Gaussian then shapes
        the differential-evolution jumps (their history is drawn from it), as a
        covariance estimate from the chain's own states cannot while the chain is stuck
        (20-d linear inverse problem, precision condition number 1e8: a random walk with
        prior-scale jumps accepted nothing in 600 steps). The quadratic's minimum is
        evaluated and the chain moves there if it is lower: a derivative-free Newton step,
        as ``_climb_to_mode`` for gradient models (warm-up draws are discarded, so where
        tuning goes is free to choose).
        """
        training = chain.training
        if len(training) < chain.explore.probe_size + max(10, self.dim):
            return current
        chain.explore.probe_size = len(training)
        try:
            probe = laplace_from_values(training.positions, training.potentials)
        except (np.linalg.LinAlgError, ValueError):  # numerically broken: keep the last one
            probe = None
        if probe is None:
            return current
        chain.explore.probe = probe
        chain.explore.probe_draws = probe.draw(self.rng, 10 * self.dim)
        candidate = self._evaluate(chain, probe.mean, with_grad=False)
        if candidate.potential < current.potential:
            return candidate
        return current

    def _climb_to_mode(self, chain: ChainState, start: ChainPoint) -> ChainPoint:
        """A few L-BFGS iterations toward the mode before the first exploration step, kept
        only as far as they climb toward the posterior's mass.

        Warm-up draws are discarded, so where tuning starts is free to choose. Starting
        in the typical set skips the long transient of HMC from a poor initial point (at a
        tiny step with a unit mass matrix), and every evaluation on the way is training
        data near the posterior. Bounded to ``mode_iterations``; on a posterior whose
        density is unbounded (a funnel) that bound did not keep the climb out of the neck
        (centred eight schools: log tau 1.61 to -13.55 in 32 iterations, where the chains
        then stayed), so ``_where_the_mass_is`` walks back along the climb's iterates.
        """
        best = [start]
        seen = {start.q.tobytes(): start}

        def potential_and_grad(q):
            point = self._evaluate(chain, q, with_grad=True)
            seen[point.q.tobytes()] = point
            if np.isfinite(point.potential) and point.potential < best[0].potential:
                best[0] = point
            if not np.isfinite(point.potential):
                return 1e300, np.zeros_like(q)
            return point.potential, point.grad

        iterates = [start]

        def record(q):
            point = seen.get(np.asarray(q, dtype=np.float64).tobytes())
            if point is not None and np.isfinite(point.potential):
                iterates.append(point)

        scipy.optimize.minimize(
            potential_and_grad, start.q, jac=True, method="L-BFGS-B", callback=record,
            options={"maxiter": self.tuning.mode_iterations, "maxfun": 2 * self.tuning.mode_iterations},
        )
        if self.dim > self.tuning.max_hessian_dim:
            return best[0]
        if iterates[-1] is not best[0]:
            iterates.append(best[0])
        hessian = self._hessian(chain, best[0], keep=True)
        current, hessian = self._where_the_mass_is(chain, iterates, hessian)
        return self._newton_from_gradients(chain, current, hessian,
                                           newton=current is best[0])

    def _hessian(self, chain: ChainState, point: ChainPoint, keep: bool) -> np.ndarray:
        """``U``'s Hessian at ``point`` by forward differences of ``d`` gradients; ``keep``
        False: counted, but neither training data nor stored (a diagnostic)."""
        if keep:
            gradient = lambda q: self._evaluate(chain, q, with_grad=True).grad  # noqa: E731
        else:
            gradient = lambda q: self.evaluator.evaluate(chain, q, True, self.tune).grad  # noqa: E731
        step = 1e-6 * np.maximum(1.0, np.abs(point.q))
        # (scipy squeezes the Jacobian of a 1-d gradient to shape (1,))
        return scipy.optimize.approx_fprime(point.q, gradient, step).reshape(self.dim, self.dim)

    def _where_the_mass_is(self, chain: ChainState, iterates: list[ChainPoint],
                           hessian: np.ndarray) -> tuple[ChainPoint, np.ndarray]:
        """The climb's iterate to start from, and ``U``'s Hessian there.

        The climb lowers ``U``; the typical set is where the mass is, and the mass near a
        point is, by Laplace's approximation, ``log m(q) = -U(q) - log|det H(q)| / 2``
        (up to a constant): on a Gaussian ``-U`` plus a constant, so the climb's end wins;
        where some coordinates are conditionally Gaussian given the others (a funnel,
        a centred hierarchy) exactly the log marginal density of the others, which falls
        in the neck as fast as ``-U`` rises there. Going back from the end, the iterate
        halfway to the start replaces the current one while it carries ``MASS_MARGIN``
        nats more: one diagnostic Hessian when the climb stands (centred eight schools:
        ``log m`` -41.0 at log tau -0.57, -78.4 at the end, log tau -13.55).

        Parameters
        ----------
        chain : ChainState
            Counts the diagnostic gradients.
        iterates : list of ChainPoint
            The climb's start, its iterates, and its end (the lowest potential) last.
        hessian : ndarray of shape (d, d)
            ``U``'s Hessian at the end.

        Returns
        -------
        point : ChainPoint
            The end, or the earlier iterate with the most mass found.
        hessian : ndarray of shape (d, d)
            ``U``'s Hessian there.
        """
        index = len(iterates) - 1
        mass = _laplace_log_mass(iterates[index], hessian)
        while index > 0:
            earlier = index // 2
            earlier_hessian = self._hessian(chain, iterates[earlier], keep=False)
            earlier_mass = _laplace_log_mass(iterates[earlier], earlier_hessian)
            # NaN (a singular or non-finite Hessian) fails the test: the later point stays
            if not earlier_mass > mass + MASS_MARGIN:
                break
            index, mass, hessian = earlier, earlier_mass, earlier_hessian
        return iterates[index], hessian

    def _newton_from_gradients(self, chain: ChainState, current: ChainPoint,
                               hessian: np.ndarray, newton: bool = True) -> ChainPoint:
        """Newton steps with a finite-difference Hessian, and a dense exploration metric
        from it.

        L-BFGS stalls on a ridge: on a regression with an uncentred covariate
        (intercept-slope correlation -0.9999) its relative-decrease test stopped it 2.3
        posterior sds from the mode, and exact HMC with a diagonal mass matrix then crawls
        along the ridge at the step size of its narrowest direction (tune and draws, sd
        0.1 of the posterior's). The Hessian at the climb's end, ``d + 1`` gradient
        evaluations by forward differences (a regression on the climb's own gradients
        could not see the ridge's curvature under the log-scale's nonlinearity), gives
        the Newton steps (kept only while they lower the potential) and the covariance
        that starts a dense mass matrix adapting to the chain's states as PyMC's
        ``QuadPotentialFullAdapt`` does.

        Parameters
        ----------
        chain : ChainState
            The chain whose probe and metric are set.
        current : ChainPoint
            Where the climb stopped.
        hessian : ndarray of shape (d, d)
            ``U``'s Hessian at ``current``.
        newton : bool
            False: no Newton steps (``_where_the_mass_is`` went back from the climb's end:
            they would chase the density into the neck the climb was taken back from).

        Returns
        -------
        ChainPoint
            Where tuning starts.
        """
        probe = step = laplace_at(current.q, current.grad, hessian)
        for _ in range(self.tuning.newton_steps if newton else 0):
            if step is None:
                break
            candidate = self._evaluate(chain, step.mean, with_grad=True)
            if not candidate.potential < current.potential:
                break
            current = candidate
            step = laplace_at(current.q, current.grad, hessian)
        if probe is None:
            return current
        chain.explore.probe = probe
        with warnings.catch_warnings():  # "experimental": it is PyMC's dense NUTS metric
            warnings.filterwarnings("ignore", "QuadPotentialFullAdapt", UserWarning)
            chain.metric = QuadPotentialFullAdapt(
                self.dim, current.q.copy(), probe.cov, 10, rng=self.rng.spawn(1)[0])
        return current

    def _explore_history(self, chain: ChainState) -> np.ndarray:
        """Past states the differential-evolution jumps are drawn from.

        The second half of the path (past the initial transient, as PyMC's DEMetropolisZ
        draws from its tuning history). While that is short, draws from the prior are
        added, as DE-MC starts from a population: differences of a chain's first few
        states span only the directions it has moved in, and a chain that starts with
        tiny steps then stays confined to them.
        """
        if chain.explore.probe is not None:
            return chain.explore.probe_draws
        history = self._late_tuning_states(chain)[0]
        if len(history) < 10 * self.dim:
            if chain.explore.prior_draws is None:
                chain.explore.prior_draws = self._draw_prior(10 * self.dim)
            history = np.vstack([chain.explore.prior_draws, history])
        return history

    def _draw_prior(self, n: int) -> np.ndarray:
        """``n`` draws that seed the exploration's population, raveled in the sampler's
        (transformed) space: prior draws, or where some prior cannot be sampled
        (``pm.Flat``, custom densities) PyMC's own jittered initial points (each variable's
        initial value plus U(-1, 1) per transformed coordinate, as ``pm.sample``'s
        ``"jitter+adapt_diag"``); empty when neither can be drawn.

        Without a population, a chain whose first proposals are all rejected has no spread
        to jump by: on a 20-d Gaussian served whole behind one Op on a ``pm.Flat`` vector
        (sds 1e-4 to 1, precision condition number 8e8) SurrogateHMC's chains stayed near
        their start (min ESS 2 in 2 x 1000 draws, sds 0.01-0.48 of the truth), and on the
        heat problem's posterior served the same way min ESS 22, R-hat 1.09, where the same
        posterior with its N(0, 1) prior in PyMC passes.
        """
        from pymc.initial_point import make_initial_point_fn

        model = self._model
        names = [v.name for v in self.vars]
        seeds = self.rng.integers(2**31, size=n)
        for settings in (
            dict(overrides={rv: "prior" for rv in model.free_RVs}, default_strategy="prior"),
            dict(jitter_rvs=set(model.free_RVs)),
        ):
            try:
                draw = make_initial_point_fn(model=model, return_transformed=True, **settings)
                rows = [np.concatenate([np.ravel(draw(int(seed))[name]) for name in names])
                        for seed in seeds]
            except Exception:  # noqa: BLE001 - a prior we cannot draw from: try the next
                continue
            rows = np.array(rows, dtype=np.float64)
            return rows[np.all(np.isfinite(rows), axis=1)]
        return np.zeros((0, self.dim))


def _laplace_log_mass(point: ChainPoint, hessian: np.ndarray) -> float:
    """``-U - log|det H| / 2``: the log of Laplace's approximation to the mass near
    ``point`` (up to a constant); NaN when ``H`` is singular or not finite. ``|det|``:
    a saddle's negative curvatures still set its local width."""
    sign, logdet = np.linalg.slogdet(0.5 * (hessian + hessian.T))
    if sign == 0 or not np.isfinite(logdet):
        return np.nan
    return -point.potential - 0.5 * logdet

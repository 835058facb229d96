"""SparseGridHMC's domain: the box the grid covers, found before sampling.

A Laplace approximation (sparse-grid-hmc §3.5) from the skeleton's exploration, its scales
checked by the model's rise at the box's faces; for a black box, widened to the exploration
states' spread.
"""

from __future__ import annotations

import numpy as np
from pymc.blocking import DictToArrayBijection

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.model_functions import ModelEvaluationError
from pymc_surrogate.surrogates.base import Domain
from pymc_surrogate.surrogates.box import check_domain, principal_box

__all__ = ["DOMAIN_SEED", "GridDomain"]

#: Seed of the domain search when no ``rng`` is given (see ``GridDomain._seeded``).
DOMAIN_SEED = 20261126


class GridDomain:
    """Mixin of ``SparseGridHMC``: the domain search and the box's Gaussian."""

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
            return Domain(*check_domain(Domain(lower.copy(), upper.copy()))), None, 0
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

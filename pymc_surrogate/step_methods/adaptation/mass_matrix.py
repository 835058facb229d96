"""The mass matrix the surrogate trajectories run with, chosen at each refit from the
surrogate's own draws (no model evaluation): dense or diagonal, and in which frame."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag, QuadPotentialFull

from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.core.adaptation import SurrogateWarmUp
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["MassMatrix"]


class MassMatrix:
    """The mass matrix of the surrogate trajectories, chosen at each refit (a part of
    ``SurrogateStep``; it holds settings only: the metric in use is the kernel's).

    Parameters
    ----------
    tuning : Tuning
        The step's tuning constants (``metric_rounds``, ``min_metric_sample_ess``,
        ``max_metric_samples``, ``metric_trust``, ``dense_correlation_margin``,
        ``dense_scale_margin``).
    dense_mass : bool or "auto"
        The kernel's ``dense_mass`` (``HMCKernel``).
    dim : int
    """

    def __init__(self, tuning, dense_mass: bool | str, dim: int):
        self.tuning = tuning
        self.dense_mass = dense_mass
        self.dim = dim

    @staticmethod
    def metric(scale: Whitening, rng: np.random.Generator):
        """PyMC's quadratic potential with the covariance of ``scale``."""
        if scale.dense:
            return QuadPotentialFull(scale.covariance, rng=rng)
        return QuadPotentialDiag(scale.covariance, rng=rng)

    def adapt(
        self, warm_up: SurrogateWarmUp, chain_scale: Whitening, states: np.ndarray,
        sample: Callable[[float, int], SurrogateWarmUp], use: Callable[[Whitening], None],
        frame: Whitening | None = None,
    ) -> float:
        """Mass matrix and step size from the surrogate's own draws: no model evaluation.

        A chain that explored badly in tuning (a direction it barely moved in) leaves a
        collapsed covariance that would keep it stuck in the draws. Sampling the surrogate
        re-measures the scale; it is trusted within a factor 1000 of the chain's estimate,
        so a surrogate that is wrong far from the data cannot blow the metric up.

        Parameters
        ----------
        warm_up : SurrogateWarmUp
            The first warm-up on the surrogate (its step size and draws).
        chain_scale : Whitening
            The chain's scale estimate, with which the surrogate was first sampled.
        states : ndarray of shape (n, d)
            The chain's late tuning states (draws of the true posterior).
        sample : callable
            ``(step_size, n_samples) -> SurrogateWarmUp``: a warm-up on the surrogate with
            the metric in use.
        use : callable
            ``scale -> None``: puts the metric of ``scale`` in use.
        frame : Whitening, optional
            A scale known before sampling, relative to which mass matrices are estimated
            (None: the parameters' own).

        Returns
        -------
        float
            The step size of the last warm-up.
        """
        step, samples = warm_up.step_size, warm_up.samples
        tuning = self.tuning
        for round_ in range(tuning.metric_rounds):
            if not (np.all(np.isfinite(samples)) and len(np.unique(samples, axis=0)) > self.dim):
                break
            # Draws that crawl in the slow directions of a poor first metric: more of them
            # (surrogate evaluations only) until they measure the scale or hit the cap.
            mixes = _mixes(samples, tuning.min_metric_sample_ess)
            while not mixes and len(samples) * 4 <= tuning.max_metric_samples:
                warm_up = sample(step, 4 * len(samples))
                step, samples = warm_up.step_size, warm_up.samples
                mixes = _mixes(samples, tuning.min_metric_sample_ess)
            if not mixes:
                break
            dense = self.dense_for_draws(samples, states)
            sampled = Whitening.from_samples(samples, dense=dense, frame=frame)
            if not dense:
                trust = tuning.metric_trust
                chain_var = chain_scale.covariance
                if chain_scale.dense:  # "auto" found the states correlated, the draws not
                    chain_var = np.diag(chain_var)
                ratio = np.clip(sampled.covariance / chain_var, 1 / trust, trust)
                sampled = Whitening(sampled.mean, np.sqrt(chain_var * ratio))
            use(sampled)
            # Draws made with a poor metric are autocorrelated in its slow directions:
            # another round, at the better metric, measures them again.
            last = round_ == tuning.metric_rounds - 1
            warm_up = sample(step, 0 if last else max(200, 4 * self.dim))
            step, samples = warm_up.step_size, warm_up.samples
        return step

    def dense_for_draws(self, samples: np.ndarray, states: np.ndarray) -> bool:
        """Whether to give the surrogate trajectories a dense mass matrix (``dense_mass``).

        ``"auto"``: when both the surrogate's own draws and the chain's late tuning states
        (draws of the true posterior) are strongly correlated: each correlation matrix far
        worse conditioned than the sampling noise of its ``n`` draws alone makes it. A
        diagonal metric on a strongly correlated posterior makes trajectories crawl at the
        narrowest direction's step (20-d linear inverse problem, condition number 1e8: 8.1
        model evaluations per effective sample against 2.0 dense); the chain's states
        guard against a poor surrogate's spurious correlation (a Gaussian fitted to a
        banana: correlation condition 50-90 where the posterior's is 3; dense, its chain
        never moved).
        """
        if self.dense_mass != "auto":
            return bool(self.dense_mass)
        margin = self.tuning.dense_correlation_margin
        return _strongly_correlated(samples, margin) and _strongly_correlated(states, margin)

    def dense_at_first(self, probe_cov: np.ndarray | None, states: np.ndarray) -> bool:
        """Whether the mass matrix the surrogate is first sampled with is dense.

        ``"auto"``: when the chain's late tuning states are strongly correlated *and* so
        is ``probe_cov``, the exploration's Laplace probe (a Newton-Hessian or
        value-regression Gaussian, ``exploration.py``; correlation matrix conditioned
        beyond ``Tuning.dense_scale_margin``). The surrogate's draws that set the final mass
        matrix (``adapt``) are only as good as the metric they were made with: with a
        diagonal one on a ridge (intercept-slope correlation -0.9999, probe condition
        ~1e5) two rounds recovered a sd of 13 of 30. States alone mislead: a banana chain
        that stalled on a line had states conditioned 346, and a dense start left it at
        bulk ESS 8 of 12000. ``states=None`` asks about the probe alone.
        """
        if self.dense_mass != "auto":
            return bool(self.dense_mass)
        if probe_cov is None:
            return False
        scale = np.sqrt(np.diag(probe_cov))
        eigs = np.linalg.eigvalsh(probe_cov / np.outer(scale, scale))
        if not eigs.min() * self.tuning.dense_scale_margin < eigs.max():
            return False
        return states is None or _strongly_correlated(states, self.tuning.dense_correlation_margin)


def _mixes(samples: np.ndarray, min_ess: float) -> bool:
    """Whether every coordinate of the surrogate draws ``samples`` (n, d) has a bulk ESS of
    at least ``min_ess``: draws that barely moved measure their sampler, not the scale
    (kilpisjarvi: 200 draws that crawled gave an intercept sd of 1.6 where the posterior's
    is 30, and the metric made from them kept the chain at ESS 4 in 400 draws)."""
    return all(bulk_ess(column) >= min_ess for column in samples.T)


def _strongly_correlated(draws: np.ndarray, margin: float) -> bool:
    """Whether the correlation matrix of ``draws`` (n, d) is more than ``margin`` times
    worse conditioned than ``n`` independent draws would make it by chance (the
    Marchenko-Pastur edges ``((1 + r) / (1 - r))^2``, ``r = sqrt(d / n)``)."""
    n, dim = draws.shape
    ratio = np.sqrt(dim / max(n, 1))
    if dim < 2 or ratio >= 0.9 or not np.all(np.isfinite(draws)):
        return False
    with np.errstate(invalid="ignore", divide="ignore"):
        eigs = np.linalg.eigvalsh(np.corrcoef(draws, rowvar=False))
    if not np.all(np.isfinite(eigs)) or eigs.min() <= 0:
        return False
    return bool(eigs.max() / eigs.min() > margin * ((1 + ratio) / (1 - ratio)) ** 2)

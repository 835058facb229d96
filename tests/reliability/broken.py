"""Deliberately broken samplers, for the power tests (``test_power.py``, ``power_table.py``).

Each one is a way a surrogate sampler can go wrong that a reliability check must catch:

* :func:`no_metropolis_correction`: every surrogate proposal accepted, so the chain samples
  the surrogate's density instead of the posterior (the bug an "exact" surrogate sampler
  must not have);
* :func:`shift_one_chain`: one chain offset by a fraction of the posterior sd (a chain
  stuck in, or biased towards, one part of the posterior);
* :func:`shrink`: draws too concentrated (sd a fraction too small), as from a sampler
  that misses the tails;
* :func:`narrow_surrogate`: a step whose surrogate is steeper than what it fitted (an
  sd ``factor`` times the posterior's on a Gaussian): exact, but a chain on it enters
  the tails rarely and leaves them slowly unless its coverage check tempers it.

The last two post-process real draws, so the broken sampler is exactly a correct one plus
the defect.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

__all__ = ["narrow_surrogate", "no_metropolis_correction", "shift_one_chain", "shrink"]


@contextmanager
def no_metropolis_correction():
    """Within the block, the surrogate-transition correction accepts every proposal.

    Patches the log acceptance ratio of ``core.transitions.correct_surrogate_move`` (the
    default ``correction="surrogate_transition"`` of SurrogateHMC and AdaptiveSurrogateHMC,
    Euclidean or Riemannian)
    to ``+inf``; the inner HMC moves on the surrogate keep their own Metropolis test, so
    the chain targets the surrogate density exactly. In-process only: sample with
    ``cores=1``.
    """
    from pymc_surrogate.core import transitions

    original = transitions.surrogate_transition_log_ratio
    transitions.surrogate_transition_log_ratio = lambda *args: np.inf
    try:
        yield
    finally:
        transitions.surrogate_transition_log_ratio = original


def shift_one_chain(x: np.ndarray, sd, fraction: float = 0.5) -> np.ndarray:
    """Draws ``x`` (chain, draw, ...) with the first chain moved by ``fraction * sd``."""
    x = np.array(x, dtype=float)
    x[0] += fraction * np.asarray(sd)
    return x


def shrink(x: np.ndarray, factor: float = 0.85) -> np.ndarray:
    """Draws ``x`` (chain, draw, ...) scaled by ``factor`` about their pooled mean."""
    x = np.asarray(x, dtype=float)
    centre = x.mean(axis=(0, 1))
    return centre + factor * (x - centre)


class _Steeper:
    """A surrogate whose potential is ``1 / factor**2`` times the one it fitted."""

    def __init__(self, inner, factor: float):
        self.inner, self.scale = inner, 1.0 / factor**2

    def fit(self, *args, **kwargs):
        self.inner.fit(*args, **kwargs)
        return self

    def value_and_grad(self, q):
        value, grad = self.inner.value_and_grad(q)
        return self.scale * value, self.scale * grad


def narrow_surrogate(step_class: type, factor: float = 0.6) -> type:
    """``step_class`` with every fitted surrogate made ``factor`` times as wide (on a
    Gaussian posterior, sds ``factor`` times the posterior's)."""

    class NarrowSurrogate(step_class):
        def _surrogate_fit(self):
            fit = super()._surrogate_fit()
            new = fit.new  # the family makes every estimator it fits with ``new``
            fit.new = lambda *args, **kwargs: _Steeper(new(*args, **kwargs), factor)
            return fit

    NarrowSurrogate.__name__ = f"Narrow{step_class.__name__}"
    return NarrowSurrogate

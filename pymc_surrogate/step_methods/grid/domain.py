"""SparseGridHMC's domain: the box the grid covers.

Given (``domain=GridBox(bounds=...)``, or ``GridBox(mean=..., cov=...)``), or found from the warm-up: the exact
exploration every step method tunes with first (``exploration.py``), whose evaluations the
chains share through the store (``sharing.py``). The box is fitted to the evaluations near
the lowest potential and grown, face by face, where the grid's own nodes say the posterior
has not fallen off at the face (sparse-grid-hmc §6: the Laplace box of §3.5 misses the
banana's arms; the burn-in trajectories find the high-density region).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.stats

from pymc_surrogate.surrogates.base import Domain
from pymc_surrogate.surrogates.box import check_domain, principal_box
from pymc_surrogate.surrogates.laplace import laplace_from_values

__all__ = ["BoxGaussian", "GridDomain", "MAX_GROWTH", "MAX_REFITS"]

#: Most times a box found from the warm-up is grown (each growth is a new grid).
MAX_GROWTH = 4
#: Most times a black box's warm-up box is re-fitted to its grid's nodes (a new grid each).
MAX_REFITS = 2
#: The nodes' Laplace approximation is trusted when its quadratic fits the nodes within
#: ``k^2 / 2`` of the lowest to this RMS, in units of ``k^2 / 2`` (measured on grids over
#: the warm-up box and the re-fitted one: the elliptic PDE, d = 5-20, 0.02-0.12; the banana
#: of sparse-grid-hmc §4.2 over a box of its moments and over one arm, 0.31-0.37).
REFIT_FIT = 0.2
#: ... and the box is re-fitted when it holds less than this share of the mass a box of
#: ``+-k`` sds holds under that approximation (the PDE, d = 20: the warm-up box held 39%
#: of the posterior's).
REFIT_MASS = 0.9
#: Draws that measure that mass (fixed seed: the box is a function of the nodes).
REFIT_DRAWS, REFIT_SEED = 4000, 20261202


class BoxGaussian(NamedTuple):
    """The box's Gaussian: centre, ``±k`` sd along the box's edges. It is the grid chain's
    first metric, the frame of its mass matrices and the continuation's rise outside."""

    lower: np.ndarray  # the box, in its own (transformed) coordinates
    upper: np.ndarray
    sd: np.ndarray  # (upper - lower) / 2k
    axes: np.ndarray  # q = mean + axes @ (unit-sd coordinates)
    mean: np.ndarray
    cov: np.ndarray

    @classmethod
    def of(cls, grid, k: float) -> BoxGaussian:
        lower, upper = grid.domain_
        sd = (upper - lower) / (2.0 * k)
        dim = lower.size
        axes = (np.eye(dim) if grid.transform is None else grid.transform.axes) * sd
        middle = 0.5 * (lower + upper)
        mean = middle if grid.transform is None else grid.transform.from_box(middle)
        return cls(lower, upper, sd, axes, mean, axes @ axes.T)


class GridDomain:
    """SparseGridHMC's box, from its settings or the warm-up (a part of the step; it holds
    settings only: the box is the grid's ``domain_``).

    Parameters
    ----------
    dim : int
    k : float
        The box's half-width in sds (``GridBox.k``).
    has_gradient : bool
        Whether the warm-up climbed to the mode (its Laplace probe then sets the box's
        axes and sds).
    """

    def __init__(self, dim: int, k: float, has_gradient: bool):
        self.dim, self.k, self.has_gradient = dim, k, has_gradient

    def given(self, bounds, mean, cov):
        """``(domain, transform)`` from ``bounds`` or ``mean``/``cov`` (checked, nothing
        evaluated), or None: the box comes from the warm-up."""
        if bounds is not None:
            try:
                lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), (self.dim,))
                                for b in bounds)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"bounds must be (lower, upper), each a number or {self.dim} numbers; "
                    f"got {bounds!r}."
                ) from err
            return Domain(*check_domain(Domain(lower.copy(), upper.copy()))), None
        if mean is None:
            return None
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
        return principal_box(mean, cov, self.k)

    def from_warm_up(self, positions: np.ndarray, potentials: np.ndarray, mode_depth: float,
                     probe, n_evaluations: int):
        """``(domain, transform)`` from the warm-up's evaluations near the typical set
        (``positions``, ``potentials``; every chain's, through the store; ``probe``: the
        exploration's Laplace probe, ``n_evaluations`` for the message): along
        the principal axes of those within ``TrainingPolicy.mode_depth`` of the lowest
        potential, ``+-k`` of their sds, and wide enough to hold them all. With a gradient,
        the axes and sds are the climb's Laplace approximation (its Newton probe), still
        wide enough to hold those evaluations.

        The Laplace box of the paper (§3.5), from the climb's Hessian or the black-box
        exploration's value regression, left the banana of §4.2 outside it: b2's sd 0.50-0.91
        of the truth, its upper 2.5% tail empty, at 10 of 10 seeds. With a gradient the
        evaluations' own sds made a box that lost the GP's (d = 3) sd: x0.93 at 2 of 6
        seeds, where the Laplace box, held to them, was right at 6 of 6
        (benchmarks/results/sparse_grid_short_*.md).
        """
        if potentials.size == 0:
            raise ValueError(_no_domain(n_evaluations))
        near = positions[potentials <= potentials.min() + mode_depth]
        if len(np.unique(near, axis=0)) <= 2 * self.dim:
            near = positions
        cov = np.cov(near, rowvar=False).reshape(self.dim, self.dim)
        if len(np.unique(near, axis=0)) <= self.dim or not np.all(np.linalg.eigvalsh(cov) > 0):
            raise ValueError(_no_domain(n_evaluations))
        mean = near.mean(axis=0)
        if self.has_gradient and probe is not None:
            mean, cov = probe.mean, probe.cov  # the climb's Laplace approximation (§3.5)
        domain, transform = principal_box(mean, cov, self.k)
        u = transform.to_box(near)
        return Domain(np.minimum(domain.lower, u.min(axis=0)),
                      np.maximum(domain.upper, u.max(axis=0))), transform

    def grown(self, grid, potentials: np.ndarray) -> Domain | None:
        """The box grown by half its width past each face where the posterior has not
        fallen off, or None.

        A face has fallen off when its lowest node lies ``k^2 / 4`` above the lowest node
        (a Gaussian's box of ``+-k`` sds rises ``k^2 / 2`` at its faces): on the banana a
        box from one arm's warm-up is open toward the other arm, and the chain left it
        there (up to 44% of the draws outside).
        """
        lower, upper = grid.domain_
        u = grid.nodes_ if grid.transform is None else grid.transform.to_box(grid.nodes_)
        finite = np.isfinite(potentials)
        if not finite.any():
            return None
        threshold = potentials[finite].min() + 0.25 * self.k**2
        width = upper - lower
        grown = [lower.copy(), upper.copy()]
        for i in range(self.dim):
            for side, bound, sign in ((0, lower[i], -1.0), (1, upper[i], 1.0)):
                face = finite & (np.abs(u[:, i] - bound) <= 1e-9 * width[i])
                if face.any() and potentials[face].min() < threshold:
                    grown[side][i] = bound + sign * 0.5 * width[i]
        if np.array_equal(grown[0], lower) and np.array_equal(grown[1], upper):
            return None
        return Domain(*grown)

    def refitted(self, grid, potentials: np.ndarray):
        """A black box's box re-fitted to the grid's nodes: ``(domain, transform)`` of
        ``+-k`` sds of their Laplace approximation, or None (the box holds its mass, or
        the quadratic does not fit the nodes: a curved posterior keeps its warm-up box).

        The warm-up's evaluations are a random walk's: in d = 20 (the black-box elliptic
        PDE) their sds were 0.58-0.96 of the posterior's, the box of ``+-3`` of them held
        39% of its mass (half-widths 1.4-4.5 posterior sds), and growing its faces left it
        1.2 sds off centre, 86% of the mass, R-hat 1.38. A grid's nodes are a design: the
        quadratic through a box's nodes gave half-widths 2.8-3.4 sds and 94% of the mass
        (a box at the posterior's own mean and covariance: R-hat 1.009, ESS 711).
        """
        finite = np.isfinite(potentials)
        if finite.sum() <= 2 * self.dim + 1:
            return None
        nodes, values = grid.nodes_[finite], potentials[finite]
        laplace = laplace_from_values(nodes, values)
        if laplace is None:
            return None
        try:
            factor = laplace.factor()
        except (np.linalg.LinAlgError, ValueError):
            return None
        rise = 0.5 * self.k**2
        z = np.linalg.solve(factor, (nodes - laplace.mean).T).T
        residual = values - 0.5 * np.sum(z * z, axis=1)
        low = values <= values.min() + rise
        if low.sum() <= self.dim:
            return None
        misfit = residual[low] - np.median(residual[low])
        if np.sqrt(np.mean(misfit**2)) > REFIT_FIT * rise:
            return None
        draws = laplace.mean + np.random.default_rng(REFIT_SEED).standard_normal(
            (REFIT_DRAWS, self.dim)) @ factor.T
        lower, upper = grid.domain_
        u = draws if grid.transform is None else grid.transform.to_box(draws)
        held = np.mean(np.all((u >= lower) & (u <= upper), axis=1))
        nominal = (2.0 * scipy.stats.norm.cdf(self.k) - 1.0) ** self.dim
        if held >= REFIT_MASS * nominal:
            return None
        return principal_box(laplace.mean, laplace.cov, self.k)


def _no_domain(n_evaluations: int) -> str:
    return (f"SparseGridHMC could not find a domain of interest: the warm-up's "
            f"{n_evaluations} evaluations span no box. Give the domain yourself "
            "(domain=GridBox(bounds=(lower, upper)), or GridBox(mean=..., cov=...)), or "
            "lengthen the warm-up (warmup=WarmUp(steps=...)).")

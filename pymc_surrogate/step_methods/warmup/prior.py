"""The model's priors as the warm-up uses them: draws that seed DE-MCz's population, and
each coordinate's prior sd that finite-difference steps are relative to."""

from __future__ import annotations

import numpy as np

__all__ = ["draw_prior", "prior_scale"]


def prior_scale(model, names: list[str], dim: int, n: int = 200,
                seed: int = 20261202) -> np.ndarray | None:
    """Each coordinate's sd under the prior, in the sampler's (transformed) space, from
    ``n`` prior draws at a fixed seed; None where the prior cannot be sampled
    (``pm.Flat``, custom densities) or gives no coordinate a spread. Coordinates without
    spread take the geometric mean of the others'. Finite-difference steps are made
    relative to it: parameters a million times apart in scale need steps that far apart.
    """
    from pymc.initial_point import make_initial_point_fn

    try:
        draw = make_initial_point_fn(model=model, return_transformed=True,
                                     overrides={rv: "prior" for rv in model.free_RVs},
                                     default_strategy="prior")
        seeds = np.random.default_rng(seed).integers(2**31, size=n)
        rows = np.array([np.concatenate([np.ravel(draw(int(s))[name]) for name in names])
                         for s in seeds], dtype=np.float64)
    except Exception:  # noqa: BLE001 - a prior we cannot draw from: no scale
        return None
    rows = rows[np.all(np.isfinite(rows), axis=1)]
    if rows.shape != (rows.shape[0], dim) or rows.shape[0] < 3:
        return None
    sd = rows.std(axis=0)
    spread = np.isfinite(sd) & (sd > 0)
    if not np.any(spread):
        return None
    return np.where(spread, sd, np.exp(np.mean(np.log(sd[spread]))))


def draw_prior(model, names: list[str], dim: int, n: int,
               rng: np.random.Generator) -> np.ndarray:
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

    seeds = rng.integers(2**31, size=n)
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
    return np.zeros((0, dim))

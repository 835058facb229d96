"""Per-draw stats (names ArviZ understands) and the progress bar's columns."""

from __future__ import annotations

import time

import numpy as np
from pymc.stats.convergence import SamplerWarning
from rich.progress import TextColumn
from rich.table import Column

__all__ = ["STATS", "draw_stats", "progressbar_config", "progressbar_update_functions"]

STATS = {
    "accept": (np.float64, []),
    "accepted": (np.float64, []),
    "diverging": (bool, []),
    "energy": (np.float64, []),
    "energy_error": (np.float64, []),
    "surrogate_energy_error": (np.float64, []),
    "step_size": (np.float64, []),
    "n_steps": (np.int64, []),
    "model_logp": (np.float64, []),
    "model_evals": (np.int64, []),
    "gradient_evals": (np.int64, []),
    "total_model_evals": (np.int64, []),
    "total_gradient_evals": (np.int64, []),
    "training_size": (np.int64, []),
    "uses_surrogate": (bool, []),
    "fallback": (bool, []),
    "tail_jump": (bool, []),
    "surrogate_fits": (np.int64, []),
    "failed_fits": (np.int64, []),
    # the chain's model evaluations so far that raised or gave NaN / +inf (each a rejection)
    "eval_failures": (np.int64, []),
    # ... and that lay far from every state evaluated before (``Tuning.far_sd``)
    "far_proposals": (np.int64, []),
    # the largest degree of the chain's transport map (0: the affine frame)
    "frame_degree": (np.int64, []),
    "diverging_total": (np.int64, []),
    "surrogate_temperature": (np.float64, []),
    "coverage_khat": (np.float64, []),
    "perf_counter_diff": (np.float64, []),
    "perf_counter_start": (np.float64, []),
    "warning": (SamplerWarning, None),
}


def draw_stats(info, chain, counts, learned, evals_before: tuple[int, int], *,
               surrogate: bool, fallback: bool, jumping: bool, divergences: int,
               far_proposals: int, frame_degree: int, warning, start: float) -> dict:
    """The ``STATS`` of one draw (the coverage's and the step class's own are added by the
    step): its transition ``info``, the chain's evaluation ``counts`` (``evals_before``:
    the logp and gradient counts before this draw) and ``learned`` surrogate (the fits)."""
    return {
        "accept": info.accept_prob,
        "accepted": float(info.accepted),
        "diverging": bool(info.diverging),
        "energy": info.energy,
        "energy_error": info.energy_error,
        "surrogate_energy_error": info.surrogate_energy_error,
        "step_size": info.step_size,
        "n_steps": info.n_steps,
        "model_logp": np.nan if chain.current_approximate else -chain.current.potential,
        "model_evals": counts.logp_evals - evals_before[0],
        "gradient_evals": counts.grad_evals - evals_before[1],
        "total_model_evals": counts.logp_evals,
        "total_gradient_evals": counts.grad_evals,
        "training_size": len(learned.training),
        "uses_surrogate": surrogate,
        "fallback": fallback,
        "tail_jump": jumping,
        "surrogate_fits": learned.fits,
        "failed_fits": learned.failed_fits,
        "eval_failures": counts.eval_failures,
        "far_proposals": far_proposals,
        "frame_degree": frame_degree,
        "diverging_total": divergences,
        "perf_counter_diff": time.perf_counter() - start,
        "perf_counter_start": start,
        "warning": warning,
    }


def progressbar_config(n_chains=1):
    columns = [
        TextColumn("{task.fields[accept]:0.2f}", table_column=Column("Accept", ratio=1)),
        TextColumn("{task.fields[step_size]:0.3f}", table_column=Column("Step size", ratio=1)),
        TextColumn("{task.fields[training_size]}", table_column=Column("Train size", ratio=1)),
        TextColumn("{task.fields[total_model_evals]}", table_column=Column("Model evals", ratio=1)),
        TextColumn("{task.fields[divergences]}", table_column=Column("Divergences", ratio=1)),
    ]
    stats = {
        "accept": [0.0] * n_chains,
        "step_size": [0.0] * n_chains,
        "training_size": [0] * n_chains,
        "total_model_evals": [0] * n_chains,
        "divergences": [0] * n_chains,
    }
    return columns, stats

def progressbar_update_functions():
    def update_stats(stats):
        return {
            "accept": stats["accept"],
            "step_size": stats["step_size"],
            "training_size": stats["training_size"],
            "total_model_evals": stats["total_model_evals"],
            "divergences": stats["diverging_total"],
            "failing": stats["diverging_total"] > 0,
        }

    return (update_stats,)

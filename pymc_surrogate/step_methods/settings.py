"""Checks of a step's variables and settings, with messages that say the way out."""

from __future__ import annotations

import numpy as np
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types

__all__ = ["block_variables", "check_settings"]


def block_variables(model, vars, initial_point: dict, owner: str) -> list:
    """The value variables of the step's block: continuous, with at least one entry."""
    if vars is None:
        vars = model.continuous_value_vars
    else:
        vars = get_value_vars_from_user_vars(vars, model)
    if not vars:
        discrete_names = [v.name for v in model.value_vars if v.dtype not in continuous_types]
        raise ValueError(
            f"{owner} needs continuous variables, and this model has none"
            + (f" (its free variables {', '.join(discrete_names)} are discrete; sample them "
               "with pm.Metropolis or pm.CategoricalGibbsMetropolis)." if discrete_names else ".")
        )
    if sum(int(np.size(initial_point[v.name])) for v in vars) == 0:
        raise ValueError(
            f"{owner}: the variables {', '.join(v.name for v in vars)} have no "
            "entries (size 0); there is nothing to sample."
        )
    discrete = [v.name for v in vars if v.dtype not in continuous_types]
    if discrete:
        raise ValueError(
            f"{owner} samples continuous variables only, but "
            f"{', '.join(discrete)} {'is' if len(discrete) == 1 else 'are'} discrete. "
            "Assign discrete variables to another step, e.g. "
            f"pm.sample(step=[{owner}([...continuous...]), pm.Metropolis([...])])."
        )
    return vars


def check_settings(owner: str, kwargs: dict, target_accept, path_length, max_energy_error,
                   tail_jumps, explore_steps, dense_mass="auto") -> None:
    if kwargs:
        raise TypeError(f"Unexpected arguments for {owner}: {sorted(kwargs)}.")
    if dense_mass not in (True, False, "auto"):
        raise ValueError(f"dense_mass must be True, False or 'auto'; got {dense_mass!r}.")
    _check_open_unit("target_accept", target_accept)
    _check_positive("path_length", path_length)
    _check_positive("max_energy_error", max_energy_error)
    if tail_jumps != "auto" and not (
        isinstance(tail_jumps, int | float | np.integer | np.floating) and 0 <= tail_jumps < 1
    ):
        raise ValueError(
            "tail_jumps must be 'auto' or a probability in [0, 1) (0 turns them off); "
            f"got {tail_jumps!r}."
        )
    if explore_steps != "auto" and (
        not isinstance(explore_steps, int | np.integer) or explore_steps < 0
    ):
        raise ValueError(
            f"explore_steps must be a non-negative integer or 'auto'; got {explore_steps!r}."
        )


def _check_positive(name: str, value) -> None:
    if not (np.isscalar(value) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number; got {value!r}.")


def _check_open_unit(name: str, value) -> None:
    if not (np.isscalar(value) and 0 < value < 1):
        raise ValueError(f"{name} must lie strictly between 0 and 1; got {value!r}.")


def exploration_executor(executor, explore_tries, context_dim: int, owner: str,
                         pseudo_marginal: bool = False):
    """Validated ``(executor, explore_tries)`` of a step's batched exploration.

    ``executor`` is None or "serial" (one call at a time) or an object with ``submit`` or
    ``map`` (a ``concurrent.futures.Executor``, ``distributed.Client(...).get_executor()``).
    Workers compile the whole model, so the step must sample all of it.
    """
    if not (isinstance(explore_tries, int | np.integer) and explore_tries >= 2):
        raise ValueError(f"{owner}: explore_tries must be an integer >= 2; got {explore_tries!r}.")
    if executor in (None, "serial"):
        return None, int(explore_tries)
    if not (hasattr(executor, "submit") or hasattr(executor, "map")):
        raise ValueError(
            f"{owner}: executor must be None (exploration one model call at a time) or an "
            "object with submit or map (a concurrent.futures.Executor, a Dask client's "
            f"get_executor()); got {executor!r}."
        )
    if pseudo_marginal:
        # Multiple tries weigh each proposal by its logp; with a noisy estimate that is not
        # the scheme whose exactness is tested.
        raise ValueError(f"{owner}: exploration in batches needs an exact logp; with "
                         "pseudo_marginal=True it explores one call at a time (executor=None).")
    if context_dim:
        raise ValueError(
            f"{owner}: an executor evaluates the whole model in its workers, but this step "
            "samples a block of it inside a CompoundStep. Give it every continuous "
            "variable, or drop the executor."
        )
    return executor, int(explore_tries)

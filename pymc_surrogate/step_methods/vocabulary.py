"""The settings the five step methods share, spelled one way, and the old spellings.

One name and one set of values for each shared idea, as PyMC's own samplers share
theirs: ``use_gradient`` ("auto", True, False; "finite_difference" where a step learns
from gradients), ``n_inner`` (a positive integer or "auto"), and "auto" (never ``None``)
for "choose for me". The spellings of earlier releases (``use_gradient=None``,
VariationalHMC's ``gradient=``, SurrogateHMC's ``alpha=None``) keep working for one
release with a ``FutureWarning`` that names the new one.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["AUTO", "FINITE_DIFFERENCE", "gradient_setting", "inner_setting", "auto_for_none"]

AUTO = "auto"
FINITE_DIFFERENCE = "finite_difference"


def _deprecated(message: str) -> None:
    # stacklevel 4: the user's call of the step class (through __init__ and this module)
    warnings.warn(message + " The old spelling will be removed in the next release.",
                  FutureWarning, stacklevel=4)


def gradient_setting(use_gradient, owner: str, finite_difference: bool = False) -> bool | str:
    """``use_gradient`` checked: "auto", True, False, or "finite_difference" (only where
    ``finite_difference``: a step that learns from gradients). ``None`` is the old "auto"."""
    if use_gradient is None:
        _deprecated(f"{owner}(use_gradient=None) is deprecated: use use_gradient='auto', "
                    "which does the same (the model's gradient where it has one).")
        return AUTO
    if isinstance(use_gradient, bool | np.bool_):
        return bool(use_gradient)
    if use_gradient == AUTO or (finite_difference and use_gradient == FINITE_DIFFERENCE):
        return use_gradient
    allowed = "'auto', True, False" + (" or 'finite_difference'" if finite_difference else "")
    raise ValueError(f"use_gradient must be {allowed}; got {use_gradient!r}.")


def inner_setting(n_inner) -> int | str:
    """``n_inner`` checked: a positive number of surrogate transitions per draw, or "auto"
    (``corrections.py``: one in tuning, three in the draws after a good tuning)."""
    if n_inner == AUTO:
        return AUTO
    if isinstance(n_inner, bool) or not isinstance(n_inner, int | np.integer) or n_inner < 1:
        raise ValueError(f"n_inner must be a positive integer or 'auto'; got {n_inner!r}.")
    return int(n_inner)


def auto_for_none(value, name: str, owner: str):
    """``value``, with the old ``None`` for "choose for me" read as "auto" (and warned)."""
    if value is None:
        _deprecated(f"{owner}({name}=None) is deprecated: use {name}='auto', which does the same.")
        return AUTO
    return value

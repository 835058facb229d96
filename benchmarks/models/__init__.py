"""Benchmark models with evaluation counters and, where known, exact reference moments.

Every builder returns ``(pm.Model, info)``; ``info`` carries the evaluation counter (see
:mod:`benchmarks.models.counting`), the parameter names and the reference posterior
moments when they are known exactly.

:data:`MODELS` maps short names to builders taking a ``size`` argument:

=====================  ==========================  ===========================  ==========================
name                   ``"smoke"``                 ``"default"``                ``"paper"``
=====================  ==========================  ===========================  ==========================
logistic               N=500, d=5                  N=10 000, d=50               N=100 000, d=50 (rns-hmc §5.1)
banana                 N=100                       N=100                        N=100 (sparse-grid-hmc §4.2)
gp                     N=20                        N=100                        N=400 (paper gives no N)
narrow_gaussian        d=4                         d=32                         d=32 (rns-hmc Fig. 3)
correlated_gaussian    d=3, cond 10                d=10, cond 100               d=50, cond 1000
pde_blackbox           4 modes, 10x10 mesh         20 modes, 30x30 mesh         20 modes, 30x30 mesh
pde_adjoint            as pde_blackbox, with the adjoint gradient
heat_blackbox          d=5, condition 1e4          d=20, condition 1e6          d=20, condition 1e8
heat_adjoint           as heat_blackbox, with a gradient
funnel_blackbox        d=2                         d=2                          d=10
funnel_gradient        as funnel_blackbox, with a gradient
served_gaussian        d=5, condition 1e4          d=20, condition 1e5          d=20, condition 2e8
=====================  ==========================  ===========================  ==========================

``heat_*`` is the 1-d heat-equation inverse problem and ``funnel_*`` Neal's funnel of
:mod:`benchmarks.models.hard_geometry` (both with exact posteriors); any condition number
through ``--model-kwargs '{"heat_blackbox": {"condition_number": 1e4}}'``.

Keyword arguments after ``size`` override the size's settings, e.g.
``MODELS["logistic"]("default", seed=3)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymc as pm

from benchmarks.models.banana import make_banana
from benchmarks.models.counting import (
    CountingIdentity,
    EvaluationCounter,
    ModelInfo,
    count_evaluations,
    evaluation_counts,
)
from benchmarks.models.gaussian_process import make_gp_model
from benchmarks.models.gaussians import (
    make_correlated_gaussian,
    make_gaussian,
    make_narrow_gaussian,
)
from benchmarks.models.hard_geometry import make_funnel, make_heat_inverse, make_served_gaussian
from benchmarks.models.logistic import make_logistic_regression

__all__ = [
    "CountingIdentity",
    "EvaluationCounter",
    "ModelInfo",
    "count_evaluations",
    "evaluation_counts",
    "make_banana",
    "make_correlated_gaussian",
    "make_gaussian",
    "make_gp_model",
    "make_logistic_regression",
    "make_narrow_gaussian",
    "make_pde_model",
    "MODELS",
    "MODEL_SIZES",
    "SIZES",
    "build_model",
]

SIZES = ("smoke", "default", "paper")


def make_pde_model(*args: Any, **kwargs: Any) -> tuple[pm.Model, Any]:
    """Elliptic PDE inverse problem; see :func:`benchmarks.models.elliptic_pde.make_pde_model`.

    Imported on first call, so this package imports even while that module is missing or broken.
    """
    from benchmarks.models.elliptic_pde import make_pde_model as _make_pde_model

    return _make_pde_model(*args, **kwargs)


#: Builder and keyword arguments per size, for each registered model.
MODEL_SIZES: dict[str, tuple[Callable[..., tuple[pm.Model, Any]], dict[str, dict[str, Any]]]] = {
    "logistic": (
        make_logistic_regression,
        {
            "smoke": {"n_obs": 500, "n_features": 5},
            "default": {"n_obs": 10_000, "n_features": 50},
            "paper": {"n_obs": 100_000, "n_features": 50},
        },
    ),
    "banana": (make_banana, {"smoke": {}, "default": {}, "paper": {}}),
    "gp": (
        make_gp_model,
        {"smoke": {"n_obs": 20}, "default": {"n_obs": 100}, "paper": {"n_obs": 400}},
    ),
    "narrow_gaussian": (make_narrow_gaussian, {"smoke": {"d": 4}, "default": {}, "paper": {}}),
    "correlated_gaussian": (
        make_correlated_gaussian,
        {
            "smoke": {"d": 3, "condition_number": 10.0},
            "default": {"d": 10, "condition_number": 100.0},
            "paper": {"d": 50, "condition_number": 1000.0},
        },
    ),
    "pde_blackbox": (
        make_pde_model,
        {
            "smoke": {"n_modes": 4, "mesh_size": 10, "gradient": False},
            "default": {"n_modes": 20, "mesh_size": 30, "gradient": False},
            "paper": {"n_modes": 20, "mesh_size": 30, "gradient": False},
        },
    ),
    "heat_blackbox": (
        make_heat_inverse,
        {
            "smoke": {"d": 5, "condition_number": 1e4, "gradient": False},
            "default": {"d": 20, "condition_number": 1e6, "gradient": False},
            "paper": {"d": 20, "condition_number": 1e8, "gradient": False},
        },
    ),
    "heat_adjoint": (
        make_heat_inverse,
        {
            "smoke": {"d": 5, "condition_number": 1e4, "gradient": True},
            "default": {"d": 20, "condition_number": 1e6, "gradient": True},
            "paper": {"d": 20, "condition_number": 1e8, "gradient": True},
        },
    ),
    "funnel_blackbox": (
        make_funnel,
        {"smoke": {"d": 2, "gradient": False}, "default": {"d": 2, "gradient": False},
         "paper": {"d": 10, "gradient": False}},
    ),
    "funnel_gradient": (
        make_funnel,
        {"smoke": {"d": 2, "gradient": True}, "default": {"d": 2, "gradient": True},
         "paper": {"d": 10, "gradient": True}},
    ),
    "served_gaussian": (
        make_served_gaussian,
        {"smoke": {"d": 5, "condition_number": 1e4, "sd_min": 0.05},
         "default": {"d": 20, "condition_number": 1e5, "sd_min": 0.05},
         "paper": {"d": 20, "condition_number": 2e8, "sd_min": 1e-4}},
    ),
    "pde_adjoint": (
        make_pde_model,
        {
            "smoke": {"n_modes": 4, "mesh_size": 10, "gradient": True},
            "default": {"n_modes": 20, "mesh_size": 30, "gradient": True},
            "paper": {"n_modes": 20, "mesh_size": 30, "gradient": True},
        },
    ),
}


def build_model(name: str, size: str = "default", **overrides: Any) -> tuple[pm.Model, Any]:
    """Build a registered model at a given size.

    Parameters
    ----------
    name : str
        Key of :data:`MODEL_SIZES`.
    size : {"smoke", "default", "paper"}
        Preset size.
    **overrides
        Keyword arguments passed to the builder on top of the preset.

    Returns
    -------
    model : pm.Model
    info : ModelInfo or the builder's own info record
    """
    if name not in MODEL_SIZES:
        raise KeyError(f"unknown model {name!r}; known: {sorted(MODEL_SIZES)}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    builder, presets = MODEL_SIZES[name]
    return builder(**{**presets[size], **overrides})


class _SizedBuilder:
    """``MODELS[name](size="default", **overrides)``.

    A class rather than a closure so that it pickles.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"Build the {name!r} model; see :func:`build_model`."

    def __call__(self, size: str = "default", **overrides: Any) -> tuple[pm.Model, Any]:
        return build_model(self.name, size, **overrides)

    def __repr__(self) -> str:
        return f"MODELS[{self.name!r}]"


#: Short name -> builder taking ``size`` ("smoke" | "default" | "paper").
MODELS: dict[str, Callable[..., tuple[pm.Model, Any]]] = {
    name: _SizedBuilder(name) for name in MODEL_SIZES
}

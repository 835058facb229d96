"""Real posteriors from posteriordb, translated to PyMC, with vendored reference summaries.

Every module ``benchmarks/posteriordb/<module>.py`` that defines

* ``POSTERIOR``: the posteriordb posterior name (``"<data>-<model>"``), and
* ``make_model() -> (pm.Model, ModelInfo)``: the model, with its parameters routed through
  :func:`benchmarks.models.counting.count_evaluations` before the likelihood and
  ``info.param_names`` the sampled variables as named in the trace,

is found by :func:`discover`; adding a posterior means adding a file.  Optional module
attributes: ``PARAM_RENAME`` (posteriordb variable name -> trace variable name, when they
differ), ``CHEAP`` (True for posteriors quick enough for the short CI run) and
``NOT_IN_REFERENCE`` (free variables posteriordb's draws do not store, e.g. a whitened latent
``f_tilde`` whose transformed ``f`` is a ``pm.Deterministic`` in ``info.param_names``).  Each
posterior's reference summary is ``reference/<POSTERIOR>.json`` and its data
``data/<data name>.json`` (see :mod:`benchmarks.posteriordb.reference`).

A module that fails to import is left out and its error kept in :func:`discovery_errors`,
so one broken file does not take the others down.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from types import ModuleType
from typing import Any

__all__ = [
    "discover",
    "discovery_errors",
    "get_module",
    "make_model",
    "param_rename",
    "posterior_names",
]

#: Modules of this package that hold no posterior.
_NOT_POSTERIORS = frozenset({"ode", "reference"})

_registry: dict[str, ModuleType] | None = None
_errors: dict[str, str] = {}


def discover(refresh: bool = False) -> dict[str, ModuleType]:
    """Find the posterior modules of this package.

    Parameters
    ----------
    refresh : bool
        Scan again (a module added since the first call is picked up).

    Returns
    -------
    dict of str to module
        posteriordb posterior name -> module, sorted by name.

    Raises
    ------
    ValueError
        If two modules claim the same posterior.
    """
    global _registry
    if _registry is not None and not refresh:
        return _registry
    found: dict[str, ModuleType] = {}
    _errors.clear()
    for entry in pkgutil.iter_modules(__path__):
        if entry.ispkg or entry.name.startswith("_") or entry.name in _NOT_POSTERIORS:
            continue
        qualified = f"{__name__}.{entry.name}"
        try:
            module = importlib.import_module(qualified)
        except Exception as exc:  # the other modules still count
            _errors[entry.name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            continue
        name = getattr(module, "POSTERIOR", None)
        if not isinstance(name, str) or not callable(getattr(module, "make_model", None)):
            continue  # a helper module, not a posterior
        if name in found:
            raise ValueError(f"{name} defined by both {found[name].__name__} and {qualified}")
        found[name] = module
    _registry = dict(sorted(found.items()))
    return _registry


def discovery_errors() -> dict[str, str]:
    """Modules that failed to import in the last :func:`discover`, with their error."""
    discover()
    return dict(_errors)


def posterior_names() -> list[str]:
    """Names of the registered posteriors, sorted."""
    return list(discover())


def get_module(posterior: str) -> ModuleType:
    """The module of a registered posterior.

    Raises
    ------
    KeyError
        If no module defines it (import errors are named in the message).
    """
    registry = discover()
    if posterior not in registry:
        extra = f"; import errors: {_errors}" if _errors else ""
        raise KeyError(f"unknown posterior {posterior!r}; known: {list(registry)}{extra}")
    return registry[posterior]


def make_model(posterior: str) -> tuple[Any, Any]:
    """Build a registered posterior's model: ``(pm.Model, ModelInfo)``."""
    return get_module(posterior).make_model()


def param_rename(posterior: str) -> dict[str, str]:
    """posteriordb variable name -> trace variable name, where a module renames one."""
    return dict(getattr(get_module(posterior), "PARAM_RENAME", {}) or {})

"""What differs between the two PyMC generations, in one place.

* PyMC 5.x / PyTensor 2.x / ArviZ 0.x (Python 3.10-3.11 and later);
* PyMC 6.x / PyTensor 3.x / ArviZ 1.x (Python 3.12 and later).

The package, its tests, examples and benchmarks read results and define Ops through these
helpers instead of testing versions where they need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import arviz as az
import numpy as np
import xarray as xr
from pytensor.graph.op import Op

try:  # PyTensor >= 2.32 moved graph walks to pytensor.graph.traversal
    from pytensor.graph.traversal import ancestors, io_toposort
except ImportError:  # pragma: no cover - older PyTensor 2.x
    from pytensor.graph.basic import ancestors, io_toposort

__all__ = [
    "ARVIZ_1",
    "PYTENSOR_PULLBACK",
    "VJPOp",
    "ancestors",
    "io_toposort",
    "bfmi",
    "bulk_ess",
    "concat_chains",
    "pareto_khat",
    "posterior_dataset",
]

#: PyTensor 3 differentiates through ``Op.pullback`` and warns on ``L_op`` / ``grad``.
PYTENSOR_PULLBACK: bool = "pullback" in Op.__dict__

#: ArviZ 1: results are ``xarray.DataTree`` and the statistics are in ``arviz_stats``
#: (PSIS among them).
ARVIZ_1: bool = int(az.__version__.split(".")[0]) >= 1

# xarray's DataTree (xarray >= 2024.10); older xarray has none, and then no result is one.
_DATATREE: type | tuple = getattr(xr, "DataTree", ())


class VJPOp(Op):
    """An Op whose gradient is its vector-Jacobian product, on both PyTensor generations.

    Subclasses implement :meth:`vjp`; it becomes ``pullback`` on PyTensor 3 and ``L_op`` on
    PyTensor 2, so neither warns. An Op with no gradient at all (a black box) needs neither:
    both generations then raise ``NotImplementedError`` from ``pytensor.grad``.
    """

    def vjp(self, inputs: Sequence, outputs: Sequence, cotangents: Sequence) -> list:
        """Cotangents of the inputs given those of the outputs (``grad_not_implemented`` or
        ``disconnected_type()`` where there are none)."""
        raise NotImplementedError(f"{type(self).__name__} has no gradient")

    if PYTENSOR_PULLBACK:

        def pullback(self, inputs, outputs, cotangents):
            return self.vjp(inputs, outputs, cotangents)

    else:

        def L_op(self, inputs, outputs, output_grads):  # noqa: N802 (PyTensor's name)
            return self.vjp(inputs, outputs, output_grads)


def posterior_dataset(idata: Any, group: str = "posterior") -> xr.Dataset:
    """One group of a sampling result as an ``xarray.Dataset`` (InferenceData or DataTree).

    A Dataset supports what both generations' results do not share: selecting several
    variables (``ds[names]``) and ``to_array()``.
    """
    node = idata[group] if isinstance(idata, _DATATREE) else getattr(idata, group)
    return node.to_dataset() if isinstance(node, _DATATREE) else node


def concat_chains(results: Sequence[Any]) -> Any:
    """Several sampling results side by side as the chains of one (posterior, sample_stats).

    Chains are renumbered from 0; the result has the type ``pm.sample`` returns.
    """
    groups = {}
    for group in ("posterior", "sample_stats"):
        parts = [posterior_dataset(r, group) for r in results]
        merged = xr.concat(parts, dim="chain")
        groups[group] = merged.assign_coords(chain=np.arange(merged.sizes["chain"]))
    if isinstance(results[0], _DATATREE):  # PyMC 6 / ArviZ 1
        return xr.DataTree.from_dict(groups)
    return az.InferenceData(**groups)


def bfmi(idata: Any) -> np.ndarray:
    """Bayesian fraction of missing information of each chain, as an array."""
    value = az.bfmi(idata)
    if isinstance(value, _DATATREE):  # ArviZ 1: the sample_stats node, one value per chain
        value = value["energy"]
    return np.asarray(value, dtype=float)


def bulk_ess(values: Any) -> float:
    """ArviZ's bulk ESS of one chain's 1-d trace (0 for a constant or non-finite one).

    ArviZ 0.x takes an ``(chain, draw)`` array; ArviZ 1 also takes more axes, so only
    this form is common to both.
    """
    trace = np.asarray(values, dtype=np.float64)[None, :]
    if not np.all(np.isfinite(trace)) or np.ptp(trace) == 0:
        return 0.0
    return float(np.asarray(az.ess(trace, method="bulk")))


def pareto_khat(log_weights: Any) -> float:
    """ArviZ's Pareto-smoothed importance sampling shape ``k`` of ``exp(log_weights)``.

    ``-inf`` when the weights are all equal (nothing to smooth). Both generations' PSIS,
    with their sign conventions: ArviZ 0.x's ``psislw`` takes log weights, ArviZ 1's takes
    log ratios of the ``loo`` kind, ``-log(weight)``. A tail made of one repeated value
    (ArviZ 1 raises) is an infinitely heavy tail: ``inf``. NaN where ArviZ could fit no
    tail (ArviZ 1 on a tail of a few distinct values, where ArviZ 0.x may say anything).
    """
    log_weights = np.asarray(log_weights, dtype=np.float64).ravel()
    if not np.all(np.isfinite(log_weights)):
        return np.inf
    if np.ptp(log_weights) < 1e-12 * max(1.0, float(np.max(np.abs(log_weights)))):
        return -np.inf
    try:
        if ARVIZ_1:
            from arviz_stats.base import array_stats

            khat = array_stats.psislw(-log_weights, r_eff=1)[1]
        else:
            khat = az.psislw(log_weights.copy(), reff=1.0)[1]
    except ValueError:
        return np.inf
    return float(khat)

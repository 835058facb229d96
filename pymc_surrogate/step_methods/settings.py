"""Every user setting of the step methods in one place: their checks and their shared
vocabulary. (The tuning constants, which are not settings, are in ``tuning.py``.)

* The step's settings are checked with messages that say the way out (``check_settings``;
  its variables and executor where they are used: ``evaluation/block_context.py``,
  ``evaluation/batch.py``).
* One name and one set of values for each shared idea, as PyMC's own samplers share
  theirs: ``use_gradient`` ("auto", True, False; "finite_difference" where a step learns
  from gradients), ``n_inner`` (a positive integer or "auto"), and "auto" (never ``None``)
  for "choose for me". The spellings of earlier releases (``use_gradient=None``,
  VariationalHMC's ``gradient=``) keep working for one release with a ``FutureWarning``
  that names the new one.
* The settings of a step's parts travel as objects, each checked when it is made:
  ``surrogate=`` the estimator a step fits (``surrogate_setting``), ``kernel=`` an
  ``HMCKernel`` (the trajectories on the surrogate and their correction) and ``warmup=``
  a ``WarmUp`` (the exact exploration before the first fit). A part's setting passed to
  the step itself is refused with the spelling that works.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np

from pymc_surrogate.surrogates.base import get_params

__all__ = ["AUTO", "FINITE_DIFFERENCE", "CORRECTIONS", "METRICS", "HMCKernel", "WarmUp", "GridBox",
           "gradient_setting", "inner_setting", "check_settings", "surrogate_setting",
           "part_setting", "variational_settings", "kernel_settings"]

AUTO = "auto"
FINITE_DIFFERENCE = "finite_difference"
CORRECTIONS = ("surrogate_transition", "hamiltonian")
METRICS = ("euclidean", "riemannian", "riemannian-diagonal")


@dataclass(frozen=True)
class HMCKernel:
    """How a step's trajectories run on the surrogate, and how the true logp corrects them.

    Pass it as ``kernel=`` to any of the step methods, e.g.
    ``SurrogateHMC(kernel=HMCKernel(n_inner=3, path_length=4.0))``; the settings left out
    keep the values below, except ``n_inner`` (see there).

    Parameters
    ----------
    correction : {"surrogate_transition", "hamiltonian"}
        ``n_inner`` surrogate HMC transitions then one Metropolis-Hastings test with the
        true logp that corrects only the surrogate's error (default; Liu 2001 §9.4), or
        one trajectory accepted with the true Hamiltonian (rns-hmc Algorithm 3), whose
        length then adapts to the true acceptance in tuning.
    n_inner : int or "auto"
        Surrogate transitions per model evaluation (surrogate transition only; they cost
        no model evaluation). "auto" (default): one in tuning; in the draws three when the
        true model accepted the surrogate's proposals at least 90% of the time over the
        last 100 surrogate steps of tuning, or when a black box's draws run on its lowered
        surrogate (``SurrogateHMC``), else one. Without ``kernel=``, VariationalHMC,
        KernelHMC and SparseGridHMC take ``n_inner=1``, SurrogateHMC and
        AdaptiveSurrogateHMC "auto".
    path_length : float
        Longest integration time of a trajectory (default 2.8).
    max_energy_error : float
        Energy error (nats) of a surrogate trajectory counted as a divergence (default 1000).
    dense_mass : bool or "auto"
        Dense mass matrix for the surrogate trajectories; "auto" (default): dense when the
        surrogate's own draws and the chain's tuning states are strongly correlated
        (their correlation matrices far worse conditioned than sampling noise makes them).
    metric : {"euclidean", "riemannian", "riemannian-diagonal"}
        SurrogateHMC and AdaptiveSurrogateHMC only. "euclidean" (default): HMC with a mass
        matrix fixed after tuning. "riemannian": RNS-RMHMC (rns-hmc §3.4), Riemannian HMC
        with the SoftAbs metric of the surrogate's Hessian (Betancourt 2013) and the
        generalised leapfrog, for curvature that changes across the typical set; no model
        evaluation more, more surrogate work per step. Needs
        ``correction="surrogate_transition"`` and all of the model's continuous variables.
        Experimental: exact (tested), but on a 2-d funnel the fitted network's Hessian has
        spurious curvature and many inner moves end in an implicit step that does not
        converge. "riemannian-diagonal": SoftAbs of the Hessian's diagonal only, the
        cheaper metric of rns-hmc's elliptic PDE (§5.2), blind to correlations.
    softabs_alpha : float
        SoftAbs's sharpness: eigenvalues ``lam`` of the Hessian become ``lam coth(alpha
        lam)``, ``|lam|`` far from zero and at least ``1 / alpha`` (default 1), relative
        to the posterior's own curvature (the moves run in the chain's whitened frame).
    tail_jumps : "auto" or float
        Share of the draws that are independence proposals from a heavy-tailed (Cauchy)
        fit to the tuning states, in [0, 1) (0: none). "auto" (default): a check when
        tuning ends decides, from the model's values at trial points, whether the tails
        reach past the tuning states (then a share of the draws jump, else none); off for
        a pseudo-marginal (noisy) logp, and wherever the draws evaluate no model.
    """

    correction: str = "surrogate_transition"
    n_inner: int | str = "auto"
    path_length: float = 2.8
    max_energy_error: float = 1000.0
    dense_mass: bool | str = "auto"
    metric: str = "euclidean"
    softabs_alpha: float = 1.0
    tail_jumps: float | str = AUTO

    def __post_init__(self):
        if self.correction not in CORRECTIONS:
            raise ValueError(
                f"HMCKernel: correction must be one of {CORRECTIONS}; got {self.correction!r}.")
        object.__setattr__(self, "n_inner", inner_setting(self.n_inner))
        _check_positive("path_length", self.path_length)
        _check_positive("max_energy_error", self.max_energy_error)
        if self.dense_mass not in (True, False, AUTO):
            raise ValueError(
                f"HMCKernel: dense_mass must be True, False or 'auto'; got {self.dense_mass!r}.")
        if self.metric not in METRICS:
            raise ValueError(f"HMCKernel: metric must be one of {METRICS}; got {self.metric!r}.")
        _check_positive("softabs_alpha", self.softabs_alpha)
        if self.tail_jumps != AUTO and not (_is_number(self.tail_jumps)
                                            and 0 <= self.tail_jumps < 1):
            raise ValueError(
                "HMCKernel: tail_jumps must be 'auto' or a probability in [0, 1) (0 turns "
                f"them off); got {self.tail_jumps!r}."
            )
        if self.metric != "euclidean" and self.correction != "surrogate_transition":
            raise ValueError(
                f"HMCKernel: metric={self.metric!r} runs with correction='surrogate_transition' "
                "only: the Hamiltonian correction would need the true model's Riemannian "
                "Hamiltonian."
            )


@dataclass(frozen=True)
class WarmUp:
    """The exact exploration that gathers a step's first training data.

    Every chain explores the model exactly (HMC, or DE-MCz without gradients) until the
    chains that share the store have made ``steps`` exploration iterations together; the
    first fit comes then. Pass it as ``warmup=``, e.g. ``SurrogateHMC(warmup=WarmUp(steps=500))``.

    Parameters
    ----------
    steps : int or "auto"
        Exploration iterations before the first fit, counted over every chain that shares
        the store. "auto" (default): 60 with gradients, ``max(300, 30 d)`` without.
    tries : int
        With an ``executor`` (black boxes): proposals evaluated at once per exploration
        iteration, a multiple-try Metropolis step (default 4: about the executor's number
        of workers).
    """

    steps: int | str = AUTO
    tries: int = 4

    def __post_init__(self):
        if self.steps != AUTO and (
            isinstance(self.steps, bool) or not isinstance(self.steps, int | np.integer)
            or self.steps < 0
        ):
            raise ValueError(
                f"WarmUp: steps must be a non-negative integer or 'auto'; got {self.steps!r}.")
        if isinstance(self.tries, bool) or not (
            isinstance(self.tries, int | np.integer) and self.tries >= 2
        ):
            raise ValueError(f"WarmUp: tries must be an integer >= 2; got {self.tries!r}.")


@dataclass(frozen=True, eq=False)
class GridBox:
    """SparseGridHMC's domain of interest: the box its grid covers.

    Pass it as ``domain=``, e.g. ``SparseGridHMC(domain=GridBox(bounds=(-3, 3)))``. Without
    ``bounds`` or ``mean`` and ``cov`` the box is found from the warm-up (see
    ``SparseGridHMC``), ``k`` sds wide.

    Parameters
    ----------
    bounds : (lower, upper), optional
        An axis-aligned box in the sampler's (unconstrained) space; each a number or one
        per coordinate.
    mean, cov : array, optional
        A box of ``±k`` standard deviations along the principal axes of ``cov`` around
        ``mean`` (give both or neither).
    k : float
        Half-width of the box in standard deviations (default 3), for ``mean`` and ``cov``
        and for the box found from the warm-up.
    """

    bounds: tuple | None = None
    mean: np.ndarray | None = None
    cov: np.ndarray | None = None
    k: float = 3.0

    def __post_init__(self):
        if not (_is_number(self.k) and np.isfinite(self.k) and self.k > 0):
            raise ValueError(
                f"GridBox: k must be a positive number of standard deviations; got {self.k!r}.")
        if (self.mean is None) != (self.cov is None):
            raise ValueError("GridBox: mean and cov set the box together: give both or neither.")
        if self.bounds is not None and self.mean is not None:
            raise ValueError("GridBox: give bounds or mean and cov, not both.")


#: The flattened spellings of earlier releases, and the part object each now belongs to.
_MOVED = {
    **{name: ("kernel", name) for name in
       ("correction", "n_inner", "path_length", "max_energy_error", "dense_mass", "metric",
        "softabs_alpha", "tail_jumps")},
    "explore_steps": ("warmup", "steps"),
    "explore_tries": ("warmup", "tries"),
    **{name: ("domain", name) for name in ("bounds", "mean", "cov", "k")},
}


def part_setting(value, cls: type, default, owner: str, argument: str, kwargs: dict):
    """A part's settings object (``kernel=``, ``warmup=``): ``value`` checked against
    ``cls`` (a dict is taken as its keyword arguments), or ``default``. Any of its settings passed to the step itself (the flattened
    spelling of earlier releases) is refused with the spelling that works."""
    moved = [name for name, (arg, _) in _MOVED.items() if arg == argument and name in kwargs]
    if moved:
        spelled = ", ".join(f"{_MOVED[name][1]}={kwargs[name]!r}" for name in moved)
        raise TypeError(
            f"{owner}: {', '.join(moved)} {'is a setting' if len(moved) == 1 else 'are settings'}"
            f" of its {argument}: pass {owner}({argument}={cls.__name__}({spelled})) "
            f"(from pymc_surrogate import {cls.__name__})."
        )
    if value is None:
        return default
    if isinstance(value, dict):  # a configuration file's or JSON's spelling
        value = cls(**value)
    if not isinstance(value, cls):
        raise TypeError(
            f"{owner}({argument}=...) takes a {cls.__name__} (from pymc_surrogate import "
            f"{cls.__name__}); got {type(value).__name__}."
        )
    return value


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
    (``kernels/surrogate_kernel.py``: one in tuning, three in the draws after a good tuning)."""
    if n_inner == AUTO:
        return AUTO
    if isinstance(n_inner, bool) or not isinstance(n_inner, int | np.integer) or n_inner < 1:
        raise ValueError(f"n_inner must be a positive integer or 'auto'; got {n_inner!r}.")
    return int(n_inner)


def surrogate_setting(surrogate, family: tuple[type, ...], default, owner: str, kwargs: dict):
    """The estimator a step fits: ``surrogate=`` (checked against the step's family), or
    the family's default. A setting of the estimator passed to the step (the old, flattened
    spelling) is refused with the spelling that works."""
    moved = sorted(set(kwargs) & {name for cls in family for name in get_params(cls())})
    if moved:
        holder = next(cls for cls in family if moved[0] in get_params(cls()))
        raise TypeError(
            f"{owner}: {', '.join(moved)} {'is a setting' if len(moved) == 1 else 'are settings'} "
            f"of the surrogate: pass {owner}(surrogate={holder.__name__}("
            f"{', '.join(f'{name}=...' for name in moved)})) "
            f"(from pymc_surrogate.surrogates import {holder.__name__})."
        )
    if surrogate is None:
        return default
    if not family:
        raise TypeError(f"{owner} takes no surrogate= (it builds its own).")
    if isinstance(surrogate, type):
        raise TypeError(
            f"{owner}(surrogate=...) takes an estimator object, not a class: "
            f"surrogate={surrogate.__name__}()."
        )
    if not isinstance(surrogate, family):
        names = " or ".join(cls.__name__ for cls in family)
        raise TypeError(
            f"{owner}(surrogate=...) takes a {names} (from pymc_surrogate.surrogates); got "
            f"{type(surrogate).__name__}. Each step method fits its own family of surrogates: "
            "see the user guide's 'Which step method'."
        )
    return surrogate


#: VariationalHMC's ``gradient=`` of earlier releases (now ``use_gradient``).
GRADIENTS = ("model", "finite_difference")


def variational_settings(exact, t0, stop_error, gradient) -> tuple:
    """VariationalHMC's ``exact``, ``t0`` and ``stop_error``, checked, and the old
    ``gradient=`` (told it is deprecated)."""
    if not isinstance(exact, bool | np.bool_):
        raise ValueError(f"exact must be True or False; got {exact!r}.")
    if gradient is not None:
        if gradient not in GRADIENTS:
            raise ValueError(f"gradient must be one of {GRADIENTS}; got {gradient!r}.")
        _deprecated(f"VariationalHMC(gradient={gradient!r}) is deprecated: use use_gradient="
                    f"{'auto' if gradient == 'model' else FINITE_DIFFERENCE!r}.")
    if t0 != "tune" and (not isinstance(t0, int | np.integer) or t0 < 1):
        raise ValueError(
            f"t0 must be 'tune' or a positive number of tuning iterations; got {t0!r}.")
    if stop_error is not None and not (np.isscalar(stop_error) and 0 < stop_error < 1):
        raise ValueError(f"stop_error must be None or lie in (0, 1); got {stop_error!r}.")
    return bool(exact), t0, stop_error, gradient


def kernel_settings(temperature, adapt_in_draws, adaptation_decay, pseudo_marginal,
                    use_gradient, auto_decay: float) -> tuple:
    """KernelHMC's own settings, checked: ``temperature``, ``adapt_in_draws``,
    ``adaptation_decay`` ("auto": ``auto_decay``, its form's), ``pseudo_marginal``, and
    ``use_gradient`` ("auto" with a noisy logp: none)."""
    for name, value in (("adapt_in_draws", adapt_in_draws), ("pseudo_marginal", pseudo_marginal)):
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be True or False; got {value!r}.")
    use_gradient = gradient_setting(use_gradient, "KernelHMC")
    if use_gradient == AUTO and pseudo_marginal:
        use_gradient = False  # the gradient of a noisy estimate is not the posterior's
    if pseudo_marginal and use_gradient is True:
        raise ValueError(
            "use_gradient=True with pseudo_marginal=True: the gradient of a noisy "
            "likelihood estimate is not the posterior's. KernelHMC needs no gradient."
        )
    if adaptation_decay == AUTO:
        adaptation_decay = auto_decay
    elif isinstance(adaptation_decay, str | bool) or not (
        np.isscalar(adaptation_decay) and 0 < adaptation_decay <= 1
    ):
        raise ValueError(
            "adaptation_decay must be 'auto' or lie in (0, 1] so that the adaptation "
            f"probabilities sum to infinity; got {adaptation_decay!r}."
        )
    if not (isinstance(temperature, str) and temperature == AUTO) and (
        isinstance(temperature, str | bool) or not (
            np.isscalar(temperature) and np.isfinite(temperature) and temperature >= 1)
    ):
        raise ValueError(
            f"temperature must be 'auto' or a finite number >= 1; got {temperature!r}.")
    temperature = temperature if temperature == AUTO else float(temperature)
    return (temperature, bool(adapt_in_draws), float(adaptation_decay), bool(pseudo_marginal),
            use_gradient)


def check_settings(owner: str, kwargs: dict, target_accept) -> None:
    if kwargs:
        raise TypeError(f"Unexpected arguments for {owner}: {sorted(kwargs)}.")
    _check_open_unit("target_accept", target_accept)


def _is_number(value) -> bool:
    """A real number, numpy's included (they register as ``numbers.Real``); not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_positive(name: str, value) -> None:
    if not (_is_number(value) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number; got {value!r}.")


def _check_open_unit(name: str, value) -> None:
    if not (_is_number(value) and 0 < value < 1):
        raise ValueError(f"{name} must be a number strictly between 0 and 1; got {value!r}.")

"""The step methods the reliability suite runs on, and what the suite knows about them.

Every test in ``tests/reliability`` that takes a ``step`` argument runs once per entry of
:data:`STEPS` (one per class in ``pymc_surrogate.STEP_METHODS``, default settings), and every
test that takes ``exact_step`` once per entry of :data:`EXACTNESS_STEPS` (the same, plus the
variants below). A new step class is covered by adding its line to ``STEP_METHODS``; a new
setting worth proving exact is one more line in :data:`VARIANTS`.

There is no list of known failures: a strict xfail keyed on one test id hid whether the rest
of that test held, and turned into a failure (XPASS) on other seeds or package versions. A
known defect is its own, clearly named test or is recorded in docs/reliability.md.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import pymc_surrogate
from pymc_surrogate import STEP_METHODS, HMCKernel, SurrogateHMC

__all__ = [
    "StepEntry",
    "STEPS",
    "VARIANTS",
    "EXACTNESS_STEPS",
    "init_parameters",
    "designed",
]


@dataclass(frozen=True)
class StepEntry:
    """A step class and the settings it runs with."""

    id: str
    cls: type
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, vars=None, **extra):
        """Construct the step inside the current model context (``Cls()`` or ``Cls(vars)``)."""
        settings = {**self.kwargs, **extra}
        if vars is None:
            return self.cls(**settings)
        return self.cls(vars, **settings)

    def __repr__(self) -> str:
        return self.id


#: One entry per public step method, with its default settings.
STEPS: list[StepEntry] = [StepEntry(name, cls) for name, cls in STEP_METHODS.items()]

#: Non-default settings that must be exact too (exactness and SBC only).
VARIANTS: list[StepEntry] = [
    StepEntry("SurrogateHMC[hamiltonian]", SurrogateHMC,
              {"kernel": HMCKernel(correction="hamiltonian")}),
    # Tail jumps in every draw's mixture, not only where the heavy-tail check asks for them
    StepEntry("SurrogateHMC[tail_jumps]", SurrogateHMC, {"kernel": HMCKernel(tail_jumps=0.2)}),
]

EXACTNESS_STEPS: list[StepEntry] = STEPS + VARIANTS


def init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Keyword parameters a step class accepts, following ``**kwargs`` up its own MRO.

    Stops at the first class outside ``pymc_surrogate`` (PyMC's own ``ArrayStepShared``), so
    what is returned are the settings the package documents; a subclass's default wins.
    """
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith(pymc_surrogate.__name__):
            break
        if "__init__" not in klass.__dict__:
            continue
        signature = inspect.signature(klass.__init__)
        for name, param in signature.parameters.items():
            if name in ("self", "vars") or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            params.setdefault(name, param)
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            break
    return params


def designed(cls: type) -> bool:
    """Whether ``cls``'s surrogate is a design evaluated before sampling (SparseGridHMC's
    grid): it drives the draws from the first iteration, whatever ``tune`` is."""
    return cls.policy.designed

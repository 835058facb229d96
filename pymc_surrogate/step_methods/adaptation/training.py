"""Training data and the policy that decides what a surrogate learns from, and when.

``TrainingSet`` keeps every model evaluation a chain makes. ``TrainingPolicy`` says what a
step's surrogate learns from (``source``: model evaluations today; chain states for
KernelHMC, a design fixed before sampling for SparseGridHMC), and when (``refit``:
``"geometric"`` batch refits in tune, ``"online"`` updates on top of them, ``"once"``),
and weighs the data (energy window, weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrainingSet", "TrainingPolicy"]

SOURCES = ("evaluations", "chain_states", "design")
REFITS = ("geometric", "online", "once")


@dataclass(frozen=True)
class TrainingPolicy:
    """What a step's surrogate learns from and when; how the training data are weighed.

    Parameters
    ----------
    source : {"evaluations", "chain_states", "design"}
        ``"evaluations"``: every model evaluation (SurrogateHMC, AdaptiveSurrogateHMC,
        VariationalHMC). ``"chain_states"``: the chain's own states, no values and no
        gradients (KernelHMC); evaluations are still kept in tune, for the exploration
        kernel, but never in the draws. ``"design"``: model values at nodes chosen and
        evaluated before sampling (SparseGridHMC's grid), so a surrogate drives the very
        first iteration; tune's evaluations are kept only for the exploration kernel and
        the skeleton's checks.
    refit : {"geometric", "online", "once"}
        ``"geometric"``: batch refits in tune at geometrically spaced iterations, frozen in
        the draws. ``"online"``: the same, and every new evaluation in between goes to the
        surrogate's ``partial_fit`` (``OnlineSurrogate``).
    learn_in_draws : bool
        Online policies: keep learning in the draws (diminishing adaptation).
    """

    source: str = "evaluations"
    refit: str = "geometric"
    learn_in_draws: bool = False

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}; got {self.source!r}.")
        if self.refit not in REFITS:
            raise ValueError(f"refit must be one of {REFITS}; got {self.refit!r}.")

    @property
    def online(self) -> bool:
        return self.refit == "online"

    @property
    def learns_from_states(self) -> bool:
        return self.source == "chain_states"

    @property
    def designed(self) -> bool:
        """The surrogate exists before sampling (no fit from the chain's evaluations)."""
        return self.source == "design"

    def records(self, frozen: bool) -> bool:
        """Whether new evaluations are training data (in tune; in the draws if online and
        the surrogate learns from evaluations)."""
        if self.learns_from_states:
            return not frozen
        return not frozen or (self.online and self.learn_in_draws)

    def adapts(self, frozen: bool) -> bool:
        """Whether the online surrogate may be swapped in now."""
        return self.online and (not frozen or self.learn_in_draws)

    @staticmethod
    def min_points(dim: int, has_gradient: bool) -> int:
        """Training points before a first fit."""
        return 2 * dim + 10 if has_gradient else 4 * dim + 20

    @staticmethod
    def min_states(dim: int) -> int:
        """Distinct chain states before a first fit to states (``"chain_states"``)."""
        return 2 * dim + 20

    @staticmethod
    def energy_window(dim: int) -> float:
        """How far above the lowest potential training points still count.

        U - min U over the typical set is about chi2_d / 2; keep far more than that.
        """
        return dim + 10.0 * np.sqrt(dim) + 20.0

    @staticmethod
    def mode_depth(dim: int) -> float:
        """How far below a chain's lowest state the posterior's mode can lie.

        Over a Gaussian-like typical set ``U - U_mode`` is about chi2_d / 2, whose mean is
        ``d / 2`` and sd ``sqrt(d / 2)``: a state lies well within ``d/2 + 3 sqrt(d/2)`` of
        the mode. A potential far lower is density without mass (a funnel's neck).
        """
        return dim / 2.0 + 3.0 * np.sqrt(dim / 2.0)

    @staticmethod
    def weights(potentials: np.ndarray, lowest: float, dim: int) -> np.ndarray:
        """Least-squares weights ``exp(-(U - lowest) / tau)``, ``tau = max(2, d / 4)``.

        Unweighted, a fit trades accuracy in the typical set, where the chain runs, for the
        tails its training data reach (docs/design.md, "The surrogate: RandomNetworkSurrogate").
        """
        return np.exp(-(np.asarray(potentials) - lowest) / max(2.0, dim / 4.0))


class TrainingSet:
    """Growable arrays of positions, potentials and gradients (NaN rows when unknown).

    Parameters
    ----------
    dim : int
    context_dim : int
        Size of the values of everything outside the block (other blocks of a compound
        step) that each evaluation was made at; 0 when the block is the whole model.
    capacity : int
        Initial allocation; doubled as needed (amortised O(1) appends).
    """

    def __init__(self, dim: int, context_dim: int = 0, capacity: int = 256):
        self.dim = dim
        self.context_dim = context_dim
        self.size = 0
        self._positions = np.empty((capacity, dim))
        self._potentials = np.empty(capacity)
        self._gradients = np.empty((capacity, dim))
        self._contexts = np.empty((capacity, context_dim))

    def __len__(self) -> int:
        return self.size

    def append(
        self,
        q: np.ndarray,
        potential: float,
        grad: np.ndarray | None,
        context: np.ndarray | None = None,
    ) -> None:
        if self.size == self._potentials.shape[0]:
            self._grow()
        i = self.size
        self._positions[i] = q
        self._potentials[i] = potential
        self._gradients[i] = np.nan if grad is None else grad
        if self.context_dim:
            self._contexts[i] = context
        self.size += 1

    def extend(self, positions: np.ndarray, potentials: np.ndarray, gradients: np.ndarray,
               contexts: np.ndarray) -> None:
        """Append rows at once (NaN gradient rows where none was computed)."""
        n = potentials.shape[0]
        while self.size + n > self._potentials.shape[0]:
            self._grow()
        rows = slice(self.size, self.size + n)
        self._positions[rows], self._potentials[rows] = positions, potentials
        self._gradients[rows] = gradients
        if self.context_dim:
            self._contexts[rows] = contexts
        self.size += n

    def convert(self, to_new) -> None:
        """The rows in new coordinates: ``to_new(positions, potentials, gradients or None)``
        returns them converted (a change of the chain's frame)."""
        n = self.size
        if not n:
            return
        has_grad = bool(np.any(np.isfinite(self.gradients)))
        q, u, g = to_new(self.positions, self.potentials, self.gradients if has_grad else None)
        self._positions[:n], self._potentials[:n] = q, u
        if has_grad:
            self._gradients[:n] = g

    def _grow(self) -> None:
        new = 2 * self._potentials.shape[0]
        for name in ("_positions", "_potentials", "_gradients", "_contexts"):
            old = getattr(self, name)
            grown = np.empty((new, *old.shape[1:]))
            grown[: self.size] = old[: self.size]
            setattr(self, name, grown)

    @property
    def positions(self) -> np.ndarray:
        return self._positions[: self.size]

    @property
    def potentials(self) -> np.ndarray:
        return self._potentials[: self.size]

    @property
    def contexts(self) -> np.ndarray:
        return self._contexts[: self.size]

    @property
    def gradients(self) -> np.ndarray:
        return self._gradients[: self.size]

    def relevant(self, energy_window: float, floor: float = -np.inf) -> np.ndarray:
        """Indices of finite points with ``floor <= U <= min U + energy_window``, the
        minimum taken over the points at or above ``floor``.

        Burn-in points far out in the tails can have potentials 1e4 above the typical set;
        left in, they dominate a least-squares fit of a region the chain never revisits.
        ``floor`` leaves out points of high density and no mass, far below anything the
        chain visits (a funnel's neck, which a climb to the mode reaches).
        """
        potentials = self.potentials
        usable = np.isfinite(potentials) & (potentials >= floor)
        if not np.any(usable):
            return np.zeros(0, dtype=int)
        lowest = potentials[usable].min()
        return np.flatnonzero(usable & (potentials <= lowest + energy_window))

"""Numpy surrogates of the potential U(q) = -logp(q). No PyMC import here."""

from pymc_surrogate.surrogates.base import (
    DesignedSurrogate,
    Domain,
    OnlineSurrogate,
    Surrogate,
)
from pymc_surrogate.surrogates.kernel_finite import KernelExpFamilyFinite
from pymc_surrogate.surrogates.kernel_lite import KernelExpFamilyLite
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
from pymc_surrogate.surrogates.score_network import ScoreNetworkSurrogate
from pymc_surrogate.surrogates.sparse_grid import NaiveGrid, SmolyakGrid
from pymc_surrogate.surrogates.triangular_map import TriangularMap
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = [
    "Surrogate",
    "OnlineSurrogate",
    "DesignedSurrogate",
    "Domain",
    "RandomNetworkSurrogate",
    "ScoreNetworkSurrogate",
    "KernelExpFamilyLite",
    "KernelExpFamilyFinite",
    "SmolyakGrid",
    "NaiveGrid",
    "TriangularMap",
    "Whitening",
]

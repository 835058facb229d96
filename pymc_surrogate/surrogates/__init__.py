"""Numpy surrogates of the potential U(q) = -logp(q). No PyMC import here."""

from pymc_surrogate.surrogates.base import PotentialSurrogate
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["PotentialSurrogate", "RandomNetworkSurrogate", "Whitening"]

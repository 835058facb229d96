"""Kernel exponential families fitted by score matching (kmc §4): KernelHMC's surrogates.

The model is an unnormalised log density ``f`` that is linear in its parameters,
``f(x) = theta . phi(x)``; score matching (Hyvarinen 2005) fits it from samples alone by
minimising, summed over the (weighted) points ``x``,

    J(theta) = sum_x w_x sum_l [ d2f/dx_l^2 (x) + (df/dx_l (x))^2 / 2 ]

plus a penalty ``lam theta^T R theta / 2``. ``J`` is quadratic in ``theta``: with
``b = -sum_x w_x sum_l d2phi/dx_l^2`` and ``C = sum_x w_x sum_l dphi/dx_l dphi/dx_l^T``,
``J = theta^T C theta / 2 - theta . b`` and the minimiser solves ``(C + lam R) theta = b``.
Every point adds ``w_x sum_l dphi/dx_l dphi/dx_l^T`` to ``C``, a term of rank at most
``d``: that is what makes the finite form's online update exact.

Both surrogates model ``log p = f + log q0`` with a Gaussian base measure
``q0 = N(0, base_scale^2 I)`` in whitened coordinates (the kernel exponential family of
Sriperumbudur et al. 2017 has one): ``f`` then fits only what the chain's states say
beyond their mean and covariance, and ``exp(-U~)`` is a proper density whatever ``f`` is.
Without it the lite form's ``f`` vanishes away from the data, so ``exp(f)`` has infinite
mass: a sampler of the surrogate alone (the surrogate transition's inner chain, the
warm-up that sets the step size) drifts off into the flat region and its step size grows
without bound (black-box 2-d Gaussian: 1e15, acceptance 0 in every draw). The base adds
``sum_l d log q0/dx_l df/dx_l`` to the objective, i.e. ``-sum_x w_x dphi/dx . d log q0/dx``
to ``b``; ``C`` is unchanged, and so is the online update.

The potential is ``U = -f - log q0`` up to an unknown constant, so both surrogates have no
level.
"""

from pymc_surrogate.surrogates.kernel_finite import KernelExpFamilyFinite
from pymc_surrogate.surrogates.kernel_lite import KernelExpFamilyLite

__all__ = ["KernelExpFamilyLite", "KernelExpFamilyFinite"]

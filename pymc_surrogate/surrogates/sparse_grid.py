"""Grid interpolants of the potential over a domain of interest (sparse-grid-hmc §3.3-3.5).

Both surrogates are designed: ``design(domain)`` gives the nodes at which the true
potential must be evaluated before sampling, ``fit`` takes those values (and only those),
and the surrogate is trusted only where ``contains(q)``; outside, the step uses the exact
potential (sparse-grid-hmc eq. 3.11).

The domain is a box ``lower <= u <= upper``. By default ``u = q``; with a ``BoxTransform``
the box lies in the coordinates ``u`` of ``q = center + axes @ u``: ``principal_box``
builds one along the principal axes of a covariance (the Laplace approximation of §3.5),
which covers a correlated posterior with far fewer wasted cells than an axis-aligned box.
"""

from pymc_surrogate.surrogates.box import BoxTransform, principal_box
from pymc_surrogate.surrogates.naive_grid import NaiveGrid
from pymc_surrogate.surrogates.smolyak_grid import SmolyakGrid, smolyak_node_count

__all__ = ["BoxTransform", "principal_box", "NaiveGrid", "SmolyakGrid", "smolyak_node_count"]

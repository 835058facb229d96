"""Third derivatives of a potential as structured parts, and their contractions in the
eigenbasis of a metric (``core/riemannian.py``).

A ridge function ``a g(w . q + b)`` has as third derivative ``a g3(z) w (x) w (x) w``
(``g3`` the third derivative of ``g``), a rank-one cube; a radial function adds a
symmetrised outer product with its frame's metric. Riemannian HMC needs three contractions
of ``M_i = Q^T (dH/dq_i) Q``, its trace weighted by a vector and the rows ``(J o M_i) u``
(for the implicit steps' Newton Jacobians) and ``u^T (J o M_i) u`` (``kinetic``, the kinetic
gradient, without forming the rows where that is cheaper), which these parts give in
``O(s d^2)`` for ``s`` terms where a dense ``(d, d, d)`` tensor costs ``O(d^4)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["DiagonalDerivative", "RankOneCubes", "SymmetrisedOuter", "diagonal_derivative",
           "pull_back", "rotate"]


class RankOneCubes(NamedTuple):
    """``sum_s c_s v_s (x) v_s (x) v_s`` (a ridge function's third derivative)."""

    coef: np.ndarray  # (s,)
    vectors: np.ndarray  # (s, d)

    def rotated(self, eigvecs: np.ndarray) -> _RotatedCubes:
        turned = self.vectors @ eigvecs
        return _RotatedCubes(self.coef, self.vectors, turned, self.coef[:, None] * turned)

    def scaled(self, factor: float) -> RankOneCubes:
        return self._replace(coef=factor * self.coef)

    def diagonal(self) -> np.ndarray:
        """``D[i, k] = T[i, k, k]``: how the Hessian's diagonal moves with ``q_i``."""
        return self.vectors.T @ (self.coef[:, None] * self.vectors**2)

    def pulled_back(self, matrix: np.ndarray) -> RankOneCubes:
        """The cubes in ``z`` where ``q = m + matrix z``: ``v -> matrix^T v``."""
        return self._replace(vectors=self.vectors @ matrix)


class _RotatedCubes(NamedTuple):
    coef: np.ndarray
    vectors: np.ndarray
    turned: np.ndarray  # V = vectors Q
    weighted: np.ndarray  # diag(coef) V

    def trace(self, ratio: np.ndarray) -> np.ndarray:
        return self.vectors.T @ (self.coef * (self.turned**2 @ ratio))

    def _inner(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        # (V diag(u) J) o diag(coef) V: diag(u) scales J (d^2) instead of V (s d)
        return (self.turned @ (u[:, None] * divided)) * self.weighted

    def rows(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.vectors.T @ self._inner(divided, u)

    def kinetic(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``rows(divided, u) @ u`` without the ``(d, s) (s, d)`` product."""
        return self.vectors.T @ (self._inner(divided, u) @ u)


class SymmetrisedOuter(NamedTuple):
    """``a_i S_jk + a_j S_ik + a_k S_ij`` for a vector ``a`` and a symmetric ``S`` (a radial
    function's third derivative has this part, with ``S`` its frame's metric; a sum of such
    terms with one ``S`` is one term, the ``a`` summed)."""

    vector: np.ndarray  # (d,): a
    matrix: np.ndarray  # (d, d): S

    def rotated(self, eigvecs: np.ndarray) -> _RotatedOuter:
        s_q = self.matrix @ eigvecs
        return _RotatedOuter(self.vector, eigvecs.T @ self.vector, s_q, eigvecs.T @ s_q)

    def scaled(self, factor: float) -> SymmetrisedOuter:
        return self._replace(vector=factor * self.vector)

    def diagonal(self) -> np.ndarray:
        """``D[i, k] = T[i, k, k] = a_i S_kk + 2 a_k S_ik``."""
        a, matrix = self.vector, self.matrix
        return np.outer(a, np.diag(matrix)) + 2.0 * matrix * a[None, :]

    def pulled_back(self, matrix: np.ndarray) -> SymmetrisedOuter:
        """The part in ``z`` where ``q = m + matrix z``: ``a -> matrix^T a``,
        ``S -> matrix^T S matrix``."""
        return SymmetrisedOuter(matrix.T @ self.vector, matrix.T @ self.matrix @ matrix)


class _RotatedOuter(NamedTuple):
    # (Q^T T_i Q)_kl = a_i P_kl + A_k (SQ)_il + A_l (SQ)_ik
    vector: np.ndarray  # a
    turned: np.ndarray  # A = Q^T a
    s_q: np.ndarray  # S Q
    p: np.ndarray  # P = Q^T S Q

    def trace(self, ratio: np.ndarray) -> np.ndarray:
        return self.vector * float(np.diag(self.p) @ ratio) + 2.0 * (self.s_q @ (ratio * self.turned))

    def kinetic(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.rows(divided, u) @ u

    def rows(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return (np.outer(self.vector, (divided * self.p) @ u)
                + ((self.s_q * u) @ divided) * self.turned
                + self.s_q * (divided @ (self.turned * u)))


class _RotatedDense(NamedTuple):
    rotated: np.ndarray  # M_i = Q^T T_i Q, (d, d, d)

    def trace(self, ratio: np.ndarray) -> np.ndarray:
        return np.einsum("ikk->ik", self.rotated) @ ratio

    def rows(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return np.einsum("ikl,kl,l->ik", self.rotated, divided, u, optimize=True)

    def kinetic(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.rows(divided, u) @ u


def pull_back(third, matrix: np.ndarray) -> list:
    """The third derivatives in ``z`` where ``q = m + matrix z``: each index contracted
    with ``matrix`` (``T_z[i,j,k] = T[a,b,c] L_ai L_bj L_ck``), structure kept."""
    parts = third if isinstance(third, list | tuple) else [third]
    return [np.einsum("abc,ai,bj,ck->ijk", part, matrix, matrix, matrix, optimize=True)
            if isinstance(part, np.ndarray) else part.pulled_back(matrix) for part in parts]


class DiagonalDerivative(NamedTuple):
    """``T[i, k, l] = delta_kl D[i, k]``: the derivative of a diagonal metric source
    (``core.softabs.diagonal_field``), ``D[i, k] = d H_kk / d q_i``."""

    matrix: np.ndarray  # (d, d): D

    def rotated(self, eigvecs: np.ndarray) -> _RotatedDiagonal:
        # A diagonal metric's eigenbasis is the coordinates' own (``geometry`` passes the
        # identity): nothing to rotate, and the contractions need no (d, d) products.
        return _RotatedDiagonal(self.matrix)

    def scaled(self, factor: float) -> DiagonalDerivative:
        return DiagonalDerivative(factor * self.matrix)


class _RotatedDiagonal(NamedTuple):
    # M_i = diag(D[i]): the trace weighs D's rows, and (J o M_i) u keeps J's diagonal
    matrix: np.ndarray  # D

    def trace(self, ratio: np.ndarray) -> np.ndarray:
        return self.matrix @ ratio

    def rows(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.matrix * (np.diagonal(divided) * u)

    def kinetic(self, divided: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.matrix @ (np.diagonal(divided) * u * u)


def diagonal_derivative(third) -> DiagonalDerivative:
    """The derivative of the Hessian's diagonal, ``D[i, k] = T[i, k, k]``, from the parts."""
    # (a part is itself a NamedTuple: a list or plain tuple holds parts)
    parts = third if isinstance(third, list | tuple) and not hasattr(third, "_fields") else [third]
    return DiagonalDerivative(sum(np.einsum("ikk->ik", part) if isinstance(part, np.ndarray)
                                  else part.diagonal() for part in parts))


def rotate(third, eigvecs: np.ndarray) -> list:
    """The third derivatives' parts, each ready to contract in the metric's eigenbasis."""
    parts = third if isinstance(third, list | tuple) else [third]
    out = []
    for part in parts:
        if isinstance(part, np.ndarray):
            out.append(_RotatedDense(np.einsum("ak,iab,bl->ikl", eigvecs, part, eigvecs,
                                               optimize=True)))
        else:
            out.append(part.rotated(eigvecs))
    return out

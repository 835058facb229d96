"""SurrogateHMC: HMC on a random-network surrogate (rns-hmc §3, Algorithms 2-3)."""

from __future__ import annotations

import numpy as np
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.transitions import (
    ChainPoint,
    TransitionInfo,
    surrogate_hmc_transition,
    surrogate_transition,
)
from pymc_surrogate.step_methods.base import ChainState, SurrogateStep
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate

__all__ = ["SurrogateHMC"]

CORRECTIONS = ("surrogate_transition", "hamiltonian")


class SurrogateHMC(SurrogateStep):
    r"""Hamiltonian Monte Carlo on a random-network surrogate, exactly corrected.

    Tuning runs in two phases. *Exploration*: exact HMC when the model has a gradient
    (every leapfrog point is kept as training data: its value and gradient), or a
    gradient-free differential-evolution random walk when it has not (every proposal is
    kept). *Exploitation*: once there is enough data, a shallow random network
    (:class:`~pymc_surrogate.surrogates.RandomNetworkSurrogate`) is fitted in coordinates
    whitened by the tuning-phase posterior scale, and trajectories run on it; the
    surrogate is refitted as the training set grows by half, and once more on all data
    when tuning ends. It is then frozen: every draw costs exactly one model logp
    evaluation (the proposal), and none when the surrogate chain does not move.

    Both corrections are exact (the chain targets the true posterior):

    * ``"surrogate_transition"`` (default; Liu 2001 §9.4, delayed acceptance): ``n_inner``
      HMC transitions exact for the surrogate density, then one Metropolis-Hastings test
      with the true logp that corrects only the surrogate's error.
    * ``"hamiltonian"`` (the paper's Algorithm 3): one leapfrog trajectory on the
      surrogate, accepted with the true Hamiltonian.

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample; all of the model's by default.
    correction : {"surrogate_transition", "hamiltonian"}
    n_inner : int
        Surrogate HMC transitions per draw with ``correction="surrogate_transition"``.
        More mix more per model evaluation on hard posteriors; one keeps the
        anti-correlation of successive draws on near-Gaussian ones.
    n_hidden : int or "auto"
        Hidden units of the random network (see ``RandomNetworkSurrogate``).
    activation : {"softplus", "rbf"}
        Additive softplus nodes (default) or radial basis nodes.
    quadratic : {"auto", "full", "diagonal", "isotropic", "none"}
        Quadratic base of the surrogate in whitened coordinates.
    alpha : float, optional
        Ridge penalty; ``None`` picks it by generalised cross-validation.
    max_hidden, max_equations : int
        Bounds on the network and on the least-squares system (time and memory of a fit).
    target_accept : float
        Step-size adaptation target: the acceptance of HMC on the surrogate alone (its
        integration error), for both corrections. The true acceptance also pays for the
        surrogate's error, which the step size cannot reduce; refits do.
    path_length : float
        Longest integration time of a trajectory, in units of the posterior scale (the
        mass matrix is the inverse tuning covariance); the integration time is drawn
        uniformly between half and all of ``path_length``, covered in equal steps no longer
        than the step size jittered by ±20%. The default 2.8 (about 0.9 pi) makes
        successive draws of a near-Gaussian posterior anti-correlated, so the effective
        sample size can exceed the number of draws (as NUTS's does); exploration uses at
        most 1.5. With ``correction="hamiltonian"`` this is the longest length: during
        tuning the length adapts (down to a tenth) so that the true acceptance, which falls
        with the distance travelled on an imperfect surrogate, reaches 0.65; when tuning
        ends, the draws get the full length if the final fit holds that acceptance on it,
        tried over 50 transitions that are no draws (50 model evaluations a chain, counted
        in ``total_model_evals``).
    dense_mass : bool
        Dense mass matrix (and trajectories) instead of diagonal.
    explore_steps : int or "auto"
        Tuning iterations before the first surrogate fit. ``"auto"``: 60 with gradients,
        ``max(300, 30 d)`` without.
    max_energy_error : float
        Energy variation that counts as a divergence (the trajectory is rejected).
    tail_jumps : "auto" or float
        Share of the draws that are *tail jumps*: independence Metropolis-Hastings proposals
        from independent Cauchy coordinates in the tuning scale, accepted with the true
        logp (exact; ``core/tail_jumps.py``). Fixed-length HMC returns slowly from
        polynomial tails, and where the surrogate is lighter than the posterior the
        correction makes tail visits rare and long; a jump leaves the tail in a few tries.
        ``"auto"`` (default): when tuning ends, 60 proposals evaluated with the true model
        (counted in ``total_model_evals``, in no draw's ``model_evals``; skipped when the
        surrogate expects them to be rejected, as on most posteriors in d >= 20) measure the
        posterior mass far past the tuning states; where it shows a polynomial tail, 20%
        of the draws are jumps (a Student-t(3) or t(5) posterior), else none (Gaussian,
        exponential or t(10) tails). A number in [0, 1) fixes the share without the check;
        0 turns the jumps off.
    use_gradient : bool, optional
        ``None`` uses the model's gradient when PyTensor can compute it; ``False`` treats
        the model as a black box.
    model : pymc.Model, optional
    rng : int or numpy Generator, optional

    Notes
    -----
    Stats per draw: ``accept`` (true acceptance probability), ``accepted`` (1.0 when the
    chain moved), ``diverging``, ``energy`` and ``energy_error`` (true Hamiltonian, or for
    the surrogate transition minus the log acceptance ratio), ``surrogate_energy_error``
    (the leapfrog's error on the surrogate), ``step_size``, ``n_steps`` (leapfrog steps on
    the surrogate), ``model_logp``, ``model_evals`` / ``gradient_evals`` (this iteration),
    ``total_model_evals`` / ``total_gradient_evals`` (this chain so far, tuning included),
    ``training_size``, ``uses_surrogate``, ``fallback`` (the exact exploration kernel ran
    where a surrogate should have: tuning too short, failed fits, or a surrogate that stopped
    moving the chain), ``tail_jump`` (the draw was a tail jump), ``surrogate_fits``,
    ``diverging_total``, and ``warning``: the step's warnings, which PyMC logs in the main
    process with any ``cores`` (a ``warnings.warn`` in a worker process would be lost).
    """

    name = "surrogate_hmc"

    def __init__(
        self,
        vars=None,
        *,
        correction: str = "surrogate_transition",
        n_inner: int = 1,
        n_hidden: int | str = "auto",
        activation: str = "softplus",
        quadratic: str = "auto",
        alpha: float | None = None,
        max_hidden: int = 500,
        max_equations: int = 20_000,
        **kwargs,
    ):
        if correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {CORRECTIONS}; got {correction!r}.")
        if not isinstance(n_inner, int | np.integer) or n_inner < 1:
            raise ValueError(f"n_inner must be a positive integer; got {n_inner!r}.")
        self.correction = correction
        self.n_inner = int(n_inner)
        # Validates the surrogate settings now rather than at the first fit.
        self._surrogate_settings = dict(
            n_hidden=n_hidden, activation=activation, quadratic=quadratic, alpha=alpha,
            max_hidden=max_hidden, max_equations=max_equations,
        )
        RandomNetworkSurrogate(**self._surrogate_settings)
        super().__init__(vars, **kwargs)

    def _fit_surrogate(self, chain: ChainState, **settings) -> RandomNetworkSurrogate:
        training = chain.training
        keep = training.relevant(self._energy_window())
        inputs, whitening = self.context.training_inputs(
            training.positions[keep], training.contexts[keep]
        )
        surrogate = RandomNetworkSurrogate(
            **{**self._surrogate_settings, **settings},
            whitening=whitening,
            random_state=self.rng.spawn(1)[0],
        )
        potentials = training.potentials[keep]
        chain.weight_reference = float(np.min(potentials))
        surrogate.fit(
            inputs, potentials, training.gradients[keep],
            sample_weight=self._training_weights(potentials, chain.weight_reference),
        )
        # A rough early fit is still worth using (the exact correction pays for it); a fit
        # that explains less than 1 - 0.8^2 = 36% of the targets' variance is not.
        if not surrogate.is_finite_ or not surrogate.training_error_ < 0.8:
            raise ValueError(
                f"the fit is unusable (relative training error {surrogate.training_error_:.3g})"
            )
        return surrogate

    # Hamiltonian correction: the true acceptance falls with the distance a trajectory
    # travels on an imperfect surrogate, not with the step size (which adapts to the
    # integration error alone). So the path length adapts to the true acceptance, by dual
    # averaging toward _path_target, between _shortest_path and all of path_length. It
    # restarts from the longest path after every refit. The final fit, made when
    # tuning ends, is often much better than the one before, whose length then cut the
    # draws' trajectories short (d = 50, condition 1000: a third of the path at true
    # acceptance 0.88, min ESS 44): stop_tuning tries the full path on it.
    _path_target = 0.65
    _shortest_path = 0.1
    _full_length_trials = 50

    # After a spurious well: refit with the ridge penalty floored at these fractions of its
    # scale (cross-validation alone may take 1e-12).
    _tamer_settings = ({"min_alpha": 1e-6}, {"min_alpha": 1e-3})

    def _use_surrogate(self, chain: ChainState, surrogate: RandomNetworkSurrogate) -> None:
        super()._use_surrogate(chain, surrogate)
        if self.correction == "hamiltonian":
            chain.path_adapt = self._length_adaptation(self.path_length)

    def _length_adaptation(self, start: float) -> DualAverageAdaptation:
        return DualAverageAdaptation(start, self._path_target, 0.05, 0.75, 10)

    def stop_tuning(self):
        chain = self.chain
        if chain.frozen or self.correction != "hamiltonian" or chain.path_adapt is None:
            super().stop_tuning()
            return
        tuned = self._clip_length(chain.path_adapt.current(False))  # what tuning arrived at
        super().stop_tuning()  # the final fit: the length restarts at the full path
        self._choose_draw_length(chain, tuned)

    def _choose_draw_length(self, chain: ChainState, tuned: float) -> None:
        """The full path for the draws if the final fit holds the target acceptance on it,
        else ``tuned``, the length tuning arrived at for the fit before.

        Runs ``_full_length_trials`` corrected transitions at the full path from where
        tuning left the chain, one model evaluation each (counted in ``total_model_evals``,
        in no draw's ``model_evals``); the draws then start from that same state (exact:
        nothing adapts in them).

        A mean over these transitions, not dual averaging on them: fifty acceptances,
        mostly 0 or near 1, left a dual-averaged length at a third of the path for one
        chain of the black-box banana whose acceptance at the full path was 0.84.
        """
        if chain.current is None:
            return
        chain.path_adapt = None  # _trajectory_length: the full path
        current = start = self._current_point(chain, chain.current.q)
        accept = np.empty(self._full_length_trials)
        for i in range(self._full_length_trials):
            info = self._surrogate_step(chain, current)
            accept[i], current = info.accept_prob, info.point
        if accept.mean() < self._path_target:
            chain.path_adapt = self._length_adaptation(tuned)  # never updated: fixed
        chain.current, chain.current_key = start, self._key(start.q)

    def _clip_length(self, length: float) -> float:
        return float(np.clip(length, self._shortest_path * self.path_length, self.path_length))

    def _trajectory_length(self, chain: ChainState) -> float:
        if chain.path_adapt is None:
            return self.path_length
        return self._clip_length(chain.path_adapt.current(self.tune and not chain.frozen))

    def _surrogate_step(self, chain: ChainState, current: ChainPoint) -> TransitionInfo:
        with_grad = self.has_gradient and not chain.frozen

        def evaluate(q: np.ndarray) -> ChainPoint:
            return self._evaluate(chain, q, with_grad=with_grad)

        step_size = chain.step_adapt.current(self.tune and not chain.frozen)
        field = self._surrogate_field(chain)
        if self.correction == "hamiltonian":
            return surrogate_hmc_transition(
                current, evaluate, field, chain.metric, step_size,
                self._trajectory_length(chain), self.max_energy_error, self.rng,
            )
        return surrogate_transition(
            current, evaluate, field, chain.metric, step_size,
            self.path_length, self.max_energy_error, self.n_inner, self.rng,
        )

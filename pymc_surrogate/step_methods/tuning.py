"""The tuning constants of the step methods (``Tuning``), each with where its value comes
from. They are not user settings: every step reads them as ``self.tuning`` and its parts
keep them from construction; a subclass may swap in ``dataclasses.replace(TUNING, ...)``.
Why each is what it is: ``docs/design.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tuning", "TUNING"]


@dataclass(frozen=True)
class Tuning:
    """Tuning constants of ``SurrogateStep`` and its subclasses (not user parameters)."""

    # --- exploration (exploration.py)
    #: Exploration's longest path: it only has to reach and cover the typical set.
    explore_path_length: float = 1.5
    #: At most this many exact leapfrog steps a trajectory (logistic d = 50: tuning cost
    #: 3057 -> 1719 evaluations with 32 and early mass updates, same ESS).
    explore_max_steps: int = 32
    #: Adapt the exploration mass matrix from PyMC's first window on (same measurement).
    early_mass_update: bool = True
    #: Start tune with an L-BFGS climb toward the mode (gradient models only), taken back
    #: to the iterate with the most Laplace mass (exploration.py, ``_where_the_mass_is``).
    start_at_mode: bool = True
    #: Bound of that climb. It does not keep the climb out of a funnel's neck (centred
    #: eight schools: log tau 1.61 to -13.55 within it); the mass check does.
    mode_iterations: int = 50
    #: Then at most this many Newton steps with a finite-difference Hessian ...
    newton_steps: int = 3
    #: ... which costs d + 1 gradient evaluations, as does each Hessian of the mass check
    #: (one when the climb's end stands): both skipped above this dimension, where the
    #: climb's end is kept unchecked.
    max_hessian_dim: int = 200
    #: Share of ``explore_steps`` every chain explores from its own start before it fits on
    #: the chains' pooled evaluations (sharing.py): a quarter, what each of PyMC's default
    #: four chains explores when they run at once.
    own_exploration_share: float = 0.25
    # --- tuning on the surrogate alone (surrogate_tuning.py)
    #: The model is evaluated at the chain's states every this many such iterations: about
    #: 50 solves in the default 1000 tuning iterations (``explore_tries`` times as many,
    #: at once, when exploration is batched).
    surrogate_check_interval: int = 20
    #: Pairs of checked states over which the expected correction acceptance is averaged ...
    surrogate_check_window: int = 10
    #: ... below which the chain tunes with exact corrections from then on. That mean is
    #: at least 0.5 (a move to lower error is always accepted); at 0.6 the surrogate's
    #: error differs by about 1.6 nats between states. The black-box PDE, whose draws'
    #: correction accepts 0.72-0.81, stays on the surrogate (0.6 is 3 sd of a 10-pair
    #: mean below 0.75).
    surrogate_check_acceptance: float = 0.6
    # --- the stall fallback (exploration.py, refit.py)
    #: Surrogate steps over which a stall is judged (black-box PDE: acceptance 0 for the
    #: rest of tuning after a poor early fit).
    stuck_window: int = 30
    #: Acceptance below which the surrogate counts as stuck.
    stuck_acceptance: float = 0.05
    #: Share of exact exploration steps in the draws of a chain whose surrogate stalled.
    stuck_explore_probability: float = 0.25
    # --- refits (refit.py)
    #: Refits at iterations growing geometrically by this factor ...
    refit_growth: float = 1.5
    #: ... plus this many iterations.
    refit_offset: int = 50
    #: True acceptance above which a due refit is postponed (the surrogate is good).
    good_acceptance: float = 0.9
    #: A fit whose relative training error is not below this explains less than 36% of
    #: the targets' variance: unusable (a rough early fit is still worth using).
    max_training_error: float = 0.8
    #: The surrogate-sampled scale is trusted within this factor of the chain's estimate.
    metric_trust: float = 1e3
    #: ``dense_mass="auto"``: dense when the surrogate draws' correlation matrix is this
    #: many times worse conditioned than sampling noise alone would make it.
    dense_correlation_margin: float = 3.0
    #: ... and the first metric after a fit is dense when the states are so and the
    #: exploration's Laplace probe's correlation matrix is conditioned beyond this
    #: (kilpisjarvi's ridge: about 1e5).
    dense_scale_margin: float = 100.0
    #: Rounds of (surrogate draws -> mass matrix) after a fit; each costs surrogate
    #: evaluations only (20-d linear inverse problem, condition number 1e8: min ESS
    #: 84 -> ? of 300 draws with a second round).
    metric_rounds: int = 2
    #: A round's surrogate draws set the metric only if every coordinate's bulk ESS is at
    #: least this (of max(200, 4 d) draws); else the chain's own scale is kept.
    min_metric_sample_ess: float = 20.0
    #: ... drawing up to this many (4x at a time) before giving up: a 20-d Gaussian served
    #: on a Flat vector (condition 1e5) left tuning with states 0.03-1.4 of the true
    #: variances; 200 draws from that metric never mixed, and the states' metric stayed.
    max_metric_samples: int = 3200
    # --- Hamiltonian correction's path length (kernels/surrogate_kernel.py)
    #: True acceptance the path length adapts toward.
    path_target: float = 0.65
    #: Shortest adapted length, as a fraction of ``path_length``.
    shortest_path: float = 0.1
    #: Trial transitions that decide whether the draws get the full path (black-box
    #: banana: a dual-averaged length over 50 trials stopped at a third of the path).
    full_length_trials: int = 50
    # --- surrogate transitions per draw (kernels/surrogate_kernel.py, ``n_inner="auto"``)
    #: Inner transitions a draw when the tuning's last ``inner_window`` surrogate steps were
    #: corrected with mean acceptance at least ``good_acceptance``: logistic regression
    #: N = 1e5, d = 50 (correction acceptance ~1.0), min ESS 247 -> 803 and 394 -> 751 at
    #: seeds 0 and 1 for the same model evaluations; black-box PDE (acceptance 0.72-0.81)
    #: worse at 4 of 6 seeds with 3 (solves per ESS median 4.0 -> 5.1), so it keeps 1.
    inner_transitions: int = 3
    #: Surrogate steps of tuning over which that acceptance is measured.
    inner_window: int = 100
    # --- the draws of a black box (draw_bound.py)
    #: Predictive sds of a quadratic fit by which SurrogateHMC's draws lower a black box's
    #: surrogate, which then takes ``inner_transitions`` a draw whatever its acceptance.
    #: Black-box PDE, tune=300, 4 chains sharing their store, seeds 57-96 (scratch, then
    #: benchmarks/line1_variants.py): R-hat <= 1.01 and <= 5 solves per min ESS at 39 of
    #: 40 runs, against 16 of 20 without either (a chain held 40-170 draws in about one
    #: run in twenty, R-hat 1.010-1.015 in three more); three transitions alone 17 of 20, the
    #: bound alone at 3 sd 18 of 20.
    draw_bound_kappa: float = 5.0
    #: ... and by at most this many times ``sqrt(d / 2)`` nats (the sd of the potential over
    #: a Gaussian posterior's typical set), a smooth cap. Offline on the final fits: the
    #: black-box banana's lowered surrogate put 59% of its mass where the posterior density
    #: is below 1e-6 of its peak uncapped, 2.0% capped (0.3% unlowered); on the black-box
    #: PDE (d = 20, cap 6.3 nats) the cap changes almost nothing (the longest expected stay
    #: at a posterior draw, over 40 fits: 62 draws against 57 uncapped and 617 unlowered).
    #: Measured with it: the banana at 2.97 evaluations per min ESS (6.25 unlowered), the PDE
    #: line above at 20 of 20 for SurrogateHMC and for Adaptive (seeds 137-156).
    draw_bound_cap: float = 2.0
    # --- coverage (coverage.py)
    #: Temper each surrogate until it covers the posterior. Off by default: measured, it
    #: fixes a surrogate too narrow everywhere (0.6 of N(0, I)'s sd: right at 6/6 seeds,
    #: 0/6 without) but not the black-box banana (SurrogateHMC right at 3/10 either way,
    #: evaluations per min ESS 4.84 -> 6.48), and it broke a chain of AdaptiveSurrogateHMC
    #: on a Gaussian cut by a log barrier (tests/reliability/test_faults.py: per-chain ESS
    #: 17 and 5 at T = 2, 1486 and 2302 untempered). docs/design.md, "Coverage".
    coverage: bool = False
    #: Pareto k of the weights exp(U~ - U) on the evaluations near the typical set above
    #: which the surrogate is tempered (on draws of a Gaussian posterior a Gaussian surrogate
    #: with s times its sd has k = 1/s^2 - 1; the evaluations reach wider, so k is larger).
    coverage_khat: float = 0.7
    #: Temperatures tried in turn, the first that brings k to ``coverage_khat`` chosen.
    coverage_temperatures: tuple = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
    #: Fewer evaluations than this measure no tail: the surrogate stays at T = 1.
    coverage_min_points: int = 100
    #: A black box's surrogate steps in tuning run on ``U~ / T``, ``T = 1 + tune_tempering /
    #: d``: their proposals, evaluated and kept, reach where the fit is too high (coverage.py).
    #: The tempered typical set lies about ``(T - 1) d / 2 = tune_tempering / 2`` nats
    #: above the posterior's, in any dimension. 0: off.
    tune_tempering: float = 4.0
    #: ... and refits then come at iterations growing by this factor, so that what the
    #: tempered steps found is learned while tuning lasts (black-box banana: right at 9
    #: of 10 seeds with 1.2 and with 1.0, 7 of 10 with ``refit_growth``'s 1.5).
    tempered_refit_growth: float = 1.2
    # --- Riemannian surrogate transitions (riemannian.py)
    #: Riemannian HMC moves on each new surrogate alone that set its step size.
    riemannian_warm_up: int = 40
    # --- far proposals (base.py's stat, kernels/tail_jumps.py)
    #: A model evaluation this many sds (in some direction of the chain's whitened frame:
    #: the largest coordinate of the whitened difference) from every state evaluated
    #: before is a far proposal (stat ``far_proposals``): nothing the surrogate learnt
    #: reaches there, and a solver there often fails. The largest coordinate, not the
    #: norm, so the limit means the same in any dimension (a posterior draw of N(0, I_200)
    #: lies about 20 from its nearest neighbour in norm, 4-5 in its largest coordinate).
    #: The tail jumps' Cauchy coordinates are cut at it (on N(0, I) the heavy-tail
    #: check's trials reached 80 sds).
    far_sd: float = 20.0
    # --- tail jumps (kernels/tail_jumps.py, core/tail_jumps.py)
    #: Share of a heavy-tailed chain's draws that are tail jumps.
    tail_jump_probability: float = 0.2
    #: True evaluations of the heavy-tail check (100 seeds: t(3) found 87-100%).
    tail_jump_trials: int = 60
    #: Jumps accepted less often than this are not worth their evaluations.
    tail_jump_min_acceptance: float = 0.05


TUNING = Tuning()

"""Chain health in the draws (``step_methods/health/chain_health.py``): a useless chain is never silent.

A deliberately broken step whose surrogate kernel never moves (a valid but useless kernel:
it leaves every distribution invariant) must produce one warning per chain that names the
chain and what to do, with ``cores=1`` and ``cores=2``; a healthy run produces none.
"""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import HMCKernel, SurrogateHMC

RUN = dict(draws=250, tune=200, chains=2, progressbar=False, compute_convergence_checks=False,
           random_seed=3)


class NeverMoves(SurrogateHMC):
    """Rejects every surrogate proposal in the draws (module level: it must pickle)."""

    def _surrogate_step(self, chain, current, record=True):
        info = super()._surrogate_step(chain, current, record)
        if chain.frozen:
            return info._replace(point=current, accepted=False, accept_prob=0.0)
        return info


class Crawls(SurrogateHMC):
    """Exact but useless in the draws: a random-walk Metropolis step of 0.01 sd."""

    def _surrogate_step(self, chain, current, record=True):
        info = super()._surrogate_step(chain, current, record)
        if not chain.frozen:
            return info
        proposal = self._evaluate(chain, current.q + 0.01 * self.rng.standard_normal(self.dim),
                                  with_grad=False, record=False)
        accept = min(1.0, float(np.exp(current.potential - proposal.potential)))
        moved = self.rng.uniform() < accept
        return info._replace(point=proposal if moved else current, accepted=moved,
                             accept_prob=accept)


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("cores", [1, 2])
def test_stuck_chains_are_named(caplog, cores):
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=NeverMoves(kernel=HMCKernel(tail_jumps=0)), cores=cores, **RUN)
    stuck = [m for m in _messages(caplog) if "rejected its last 100 draws" in m]
    assert sorted(m.split(" has rejected")[0].split(": ")[-1] for m in stuck) == ["chain 0", "chain 1"]
    assert all("Increase `tune`" in m and "NUTS" in m for m in stuck)
    # the same chains' low acceptance is its own symptom, told once per chain
    assert len([m for m in _messages(caplog) if "accepted 0% of the surrogate" in m]) == 2


def test_slow_mixing_is_told(caplog):
    """A chain that moves (every draw accepted) but mixes far too slowly to estimate."""
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=Crawls(kernel=HMCKernel(tail_jumps=0)), cores=1, **{**RUN, "draws": 450})
    slow = [m for m in _messages(caplog) if "effective sample size of" in m]
    assert len(slow) == 2 and "chain 0" in slow[0] and "chain 1" in slow[1]


def _slow_mixing_advice(caplog, centred: bool) -> list[str]:
    """The slow-mixing warnings of crawling chains on a small hierarchy, written centred
    (``theta ~ N(mu, tau)``) or non-centred (``theta = mu + tau * z``)."""
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        if centred:
            pm.Normal("theta", mu, tau, shape=2)
        else:
            pm.Deterministic("theta", mu + tau * pm.Normal("z", 0.0, 1.0, shape=2))
        pm.sample(step=Crawls(kernel=HMCKernel(tail_jumps=0)), cores=1, **{**RUN, "chains": 1, "draws": 450})
    return [m for m in _messages(caplog) if "effective sample size of" in m]


def test_slow_mixing_advice_fits_the_model(caplog):
    """The advice to write the model non-centred names the centred variable and its scale,
    and is not given to a model that is non-centred already; the slowest trace is named."""
    told = _slow_mixing_advice(caplog, centred=True)
    assert len(told) == 1 and "write `theta` non-centred" in told[0] and "`tau`" in told[0]
    caplog.clear()
    told = _slow_mixing_advice(caplog, centred=False)
    assert len(told) == 1 and "non-centred" not in told[0]
    slowest = told[0].split(": ")[1].split(" of chain")[0]
    assert slowest in {"the model logp", "`mu`", "`tau_log__`", "`z[0]`", "`z[1]`"}, told[0]


def test_healthy_run_is_quiet(caplog):
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=SurrogateHMC(), cores=1, **{**RUN, "draws": 500})  # past the ESS check
    assert not [m for m in _messages(caplog) if "SurrogateHMC" in m]



class NeverMovesNoisy(NeverMoves):
    """``NeverMoves`` judged as a pseudo-marginal chain (a noisy likelihood estimate)."""

    pseudo_marginal = True


def test_a_pseudo_marginal_chain_is_judged_on_its_own_scale(caplog):
    """Correct pseudo-marginal chains reject 90-190 draws in a row at the optimal noise
    (docs/design.md, "Chain health"): 250 rejections are not called stuck, 1000 are, and the
    chain's ESS is judged at 800 draws (a chain that never moves has none)."""
    run = {**RUN, "chains": 1}
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=NeverMovesNoisy(kernel=HMCKernel(tail_jumps=0)), cores=1, **run)
    assert not [m for m in _messages(caplog) if "in a row" in m or "effective sample" in m]
    caplog.clear()
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=NeverMovesNoisy(kernel=HMCKernel(tail_jumps=0)), cores=1, **{**run, "draws": 1050})
    assert len([m for m in _messages(caplog) if "rejected its last 1000 draws" in m]) == 1
    assert len([m for m in _messages(caplog) if "effective sample size of" in m]) == 1


def test_a_proposal_is_far_only_beyond_twenty_in_a_whitened_coordinate_from_every_state():
    """The largest coordinate of the whitened difference to the nearest evaluated state:
    along a correlation a point can be near in each coordinate's sds and still far."""
    from pymc_surrogate.step_methods.health.far_proposals import FarProposals
    from pymc_surrogate.surrogates.whitening import Whitening

    frame = Whitening(np.zeros(2), np.linalg.cholesky(np.array([[1.0, 0.99], [0.99, 1.0]])))
    positions = np.zeros((1, 2))
    far = FarProposals(2, limit=20.0)
    far.check(np.array([15.0, 15.0]), positions, frame)  # along the correlation: (15, 1.1)
    assert far.count == 0
    far.check(np.array([2.0, -2.0]), positions, frame)  # across it: (2, -28.2)
    assert far.count == 1
    far.check(np.array([2.0, -2.0]), np.vstack([positions, [[1.5, -1.5]]]), frame)
    assert far.count == 1  # a new state near it
    far.check(np.array([50.0, 0.0]), positions, None)  # no frame yet: nothing counted
    assert far.count == 1


def test_far_proposals_counts_proposals_far_from_every_evaluated_state(monkeypatch):
    """A sound Gaussian run proposes nothing far (stat ``far_proposals`` 0); a step that
    also evaluates a proposal 1000 sds out at each draw has each one counted."""
    from pymc_surrogate import HMCKernel, SurrogateHMC

    sample = dict(draws=100, tune=300, chains=1, cores=1, progressbar=False, random_seed=3,
                  compute_convergence_checks=False)
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        sound = pm.sample(step=SurrogateHMC(), **sample)
    assert int(sound.sample_stats.far_proposals.values[0, -1]) == 0

    transition = SurrogateHMC._surrogate_step

    def also_far_in_the_draws(self, chain, current, record=True):
        if chain.frozen:
            self._evaluate(chain, current.q + 1000.0, with_grad=False)
        return transition(self, chain, current, record)

    monkeypatch.setattr(SurrogateHMC, "_surrogate_step", also_far_in_the_draws)
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        broken = pm.sample(step=SurrogateHMC(kernel=HMCKernel(tail_jumps=0)), **sample)
    assert int(broken.sample_stats.far_proposals.values[0, -1]) >= 100

"""Chain health in the draws (``step_methods/health.py``): a useless chain is never silent.

A deliberately broken step whose surrogate kernel never moves (a valid but useless kernel:
it leaves every distribution invariant) must produce one warning per chain that names the
chain and what to do, with ``cores=1`` and ``cores=2``; a healthy run produces none.
"""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import SurrogateHMC

RUN = dict(draws=250, tune=200, chains=2, progressbar=False, compute_convergence_checks=False,
           random_seed=3)


class NeverMoves(SurrogateHMC):
    """Rejects every surrogate proposal in the draws (module level: it must pickle)."""

    def _surrogate_step(self, chain, current, record=True):
        info = super()._surrogate_step(chain, current, record)
        if chain.frozen:
            return info._replace(point=current, accepted=False, accept_prob=0.0)
        return info


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("cores", [1, 2])
def test_stuck_chains_are_named(caplog, cores):
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=NeverMoves(tail_jumps=0), cores=cores, **RUN)
    stuck = [m for m in _messages(caplog) if "rejected its last 100 draws" in m]
    assert sorted(m.split(" has rejected")[0].split(": ")[-1] for m in stuck) == ["chain 0", "chain 1"]
    assert all("Increase `tune`" in m and "NUTS" in m for m in stuck)
    # the same chains' low acceptance is its own symptom, told once per chain
    assert len([m for m in _messages(caplog) if "accepted 0% of the surrogate" in m]) == 2


def test_healthy_run_is_quiet(caplog):
    with pm.Model(), caplog.at_level(logging.WARNING, logger="pymc"):
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(step=SurrogateHMC(), cores=1, **RUN)
    assert not [m for m in _messages(caplog) if "SurrogateHMC" in m]


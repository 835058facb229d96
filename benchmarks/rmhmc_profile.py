"""Where RNS-RMHMC's draws spend their time, on a fixed fitted surrogate (issue 35).

Two steps. ``fit`` samples the elliptic PDE (d = 20) once with
``SurrogateHMC(metric="riemannian")`` (1 chain, ``--tune`` + ``--draws``) and pickles what
the draws' surrogate moves need: the surrogate, the chain's whitened frame, temperature,
step size, path length, SoftAbs alpha and the last state. ``replay`` runs ``--moves``
Riemannian moves (``core.riemannian.riemannian_move``, the draws' jittered step and
length, a fixed seed) on that fit, in the frame, without the model: the inner kernel alone,
the part of a draw iteration the surrogate's Riemannian geometry costs. It prints
milliseconds per move and saves the chain (positions and move statistics) to compare two
versions of the package; ``--profile`` prints cProfile's tables instead::

    PYTHONPATH=. python benchmarks/rmhmc_profile.py fit /tmp/fit.pkl
    PYTHONPATH=. python benchmarks/rmhmc_profile.py replay /tmp/fit.pkl --moves 200 --out /tmp/new.npy
    PYTHONPATH=/path/to/other/checkout python benchmarks/rmhmc_profile.py replay /tmp/fit.pkl \
        --out /tmp/old.npy

A pickled fit is read by the package that replays it: both versions must pickle the
surrogate compatibly. Comparing draws of ``pm.sample`` across versions instead is
confounded: tuning runs Riemannian moves too, a chain amplifies rounding, and two versions
that differ in the last bit tune to different step sizes and path lengths (same seed:
4.0 against 10.3 leapfrog steps per draw).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.append(str(_REPO))  # after PYTHONPATH: another checkout's package may replay

import numpy as np  # noqa: E402


def fit(path: str, tune: int, draws: int, seed: int) -> None:
    import pymc as pm

    import pymc_surrogate
    from benchmarks.rmhmc_table1 import make_problem

    problem = make_problem("pde", "paper")
    with problem.model:
        step = pymc_surrogate.STEP_METHODS["SurrogateHMC"](kernel={"metric": "riemannian"})
        pm.sample(draws=draws, tune=tune, chains=1, cores=1, step=step, random_seed=seed,
                  progressbar=False, compute_convergence_checks=False)
    chain = step.chain
    state = {"surrogate": step.learned.surrogate, "whitening": step.learned.whitening,
             "temperature": step.coverage.temperature,
             "step_size": float(step.kernel.step_adapt.current(False)),
             "path_length": step.kernel.path_length, "alpha": step.riemannian.softabs_alpha,
             "q": np.asarray(chain.current.q)}
    with open(path, "wb") as handle:
        pickle.dump(state, handle)
    print({k: v for k, v in state.items() if k in ("temperature", "step_size", "path_length")})


def replay(path: str, moves: int, seed: int) -> tuple[np.ndarray, float]:
    """``moves`` moves from the fit's last state; returns (positions | stats, seconds)."""
    from pymc_surrogate.core.jitter import jittered_trajectory
    from pymc_surrogate.core.riemannian import riemannian_move
    from pymc_surrogate.core.softabs import geometry, in_frame, tempered3
    from pymc_surrogate.surrogates.curvature import random_network_derivatives

    with open(path, "rb") as handle:
        state = pickle.load(handle)
    surrogate, frame, alpha = state["surrogate"], state["whitening"], state["alpha"]
    field = in_frame(tempered3(lambda q: random_network_derivatives(surrogate, q),
                               state["temperature"]), frame)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    geom = geometry(frame.to_white(state["q"]), field, alpha)
    rows = []
    for _ in range(moves):
        eps, steps = jittered_trajectory(state["step_size"], state["path_length"], rng,
                                         max_steps=256, shortest=0.5)
        move = riemannian_move(geom, field, alpha, eps, steps, rng)
        geom = move.geom
        rows.append(np.concatenate([geom.q, [move.accept_prob, move.energy_error,
                                             move.fixed_point_iterations, move.n_steps,
                                             move.diverged]]))
    return np.array(rows), time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_fit = sub.add_parser("fit", help="sample the PDE once and pickle the fitted surrogate")
    p_fit.add_argument("path")
    p_fit.add_argument("--tune", type=int, default=1000)
    p_fit.add_argument("--draws", type=int, default=200)
    p_fit.add_argument("--seed", type=int, default=0)
    p_rep = sub.add_parser("replay", help="time Riemannian moves on a pickled fit")
    p_rep.add_argument("path")
    p_rep.add_argument("--moves", type=int, default=200)
    p_rep.add_argument("--seed", type=int, default=123)
    p_rep.add_argument("--out", help="save positions and move statistics (.npy)")
    p_rep.add_argument("--profile", action="store_true", help="print cProfile's tables")
    args = parser.parse_args(argv)
    if args.command == "fit":
        fit(args.path, args.tune, args.draws, args.seed)
        return
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        chain, seconds = replay(args.path, args.moves, args.seed)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(20)
        stats.sort_stats("cumulative").print_stats(25)
    else:
        chain, seconds = replay(args.path, args.moves, args.seed)
    import pymc_surrogate

    print(f"{Path(pymc_surrogate.__file__).parent}: {1000 * seconds / args.moves:.3f} ms/move, "
          f"{chain[:, -2].mean():.2f} leapfrog steps and {chain[:, -3].mean():.2f} Newton "
          f"iterations per step, acceptance {chain[:, -5].mean():.3f}, "
          f"{int(chain[:, -1].sum())} divergent")
    if args.out:
        np.save(args.out, chain)


if __name__ == "__main__":
    main()

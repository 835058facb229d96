"""Runs that start from a kept store: after a kill, and after a finished run (issue 36).

Issue 36's second line, on the black-box PDE: a run killed with SIGKILL in tuning keeps its
evaluations in the store (``tests/step_methods/test_sharing.py`` checks every one of them);
the rerun with the same store reaches the kill point's fit with <= 10% new solves; a second
run of 1000 more draws with the store of a finished run spends <= 100 solves before its
first draw::

    PYTHONPATH=. python benchmarks/store_restart.py --tag pde
    python benchmarks/store_restart.py --modes 4 --mesh 10 --kill-at 400 --tag smoke

Steps: (1) a run (``tune`` + ``draws``, one chain) is started in a subprocess with
``store=<file>`` and killed with SIGKILL once the store holds ``--kill-at`` rows (the
first fit comes after ``explore_steps`` = 600 exploration iterations at d = 20, so the kill
is after it, in tuning); (2) the same run again, same store: the solves until its first
fit against the store's rows at the kill; (3) that run finishes, and then (4) runs of
``--draws`` more draws on its store with ``tune`` in ``--second-tunes``: solves before the
first draw (the first draw's ``total_model_evals`` less its own ``model_evals``: tuning
and the checks when tuning ends), their min ESS and R-hat against a run alone.
Output: ``benchmarks/results/store_restart_<tag>.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from benchmarks.harness import DEFAULT_RESULTS_DIR, environment_meta, git_commit  # noqa: E402
from benchmarks.models import make_pde_model  # noqa: E402
from pymc_surrogate import SurrogateHMC  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from pymc_surrogate.step_methods.evaluation.store import EvaluationStore  # noqa: E402

CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    import pymc as pm
    from benchmarks.models import make_pde_model
    from pymc_surrogate import SurrogateHMC
    if __name__ == "__main__":
        model, _ = make_pde_model(n_modes={modes}, mesh_size={mesh}, gradient=False)
        with model:
            pm.sample(draws={draws}, tune={tune}, chains=1, cores=1, progressbar=False,
                      random_seed={seed}, step=SurrogateHMC(store={path!r}))
""")


class ExactTuning(SurrogateHMC):
    """SurrogateHMC that tunes with exact corrections even on a finished run's store (as
    before ``surrogate_tuning.py``): the comparison for its draws."""

    def _tunes_on_surrogate(self, chain) -> bool:
        return False


def sample(args, store, tune: int, draws: int, seed: int, step_class=SurrogateHMC):
    model, _ = make_pde_model(n_modes=args.modes, mesh_size=args.mesh, gradient=False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(draws=draws, tune=tune, chains=1, cores=1, random_seed=seed,
                         progressbar=False, discard_tuned_samples=False,
                         compute_convergence_checks=False, step=step_class(store=store))


def kill_when(path: Path, rows: int, args) -> int:
    """Start the first run in a process and SIGKILL it once the store holds ``rows``."""
    script = path.with_suffix(".py")
    script.write_text(CHILD.format(repo=str(_REPO), modes=args.modes, mesh=args.mesh,
                                   draws=args.draws, tune=args.tune, seed=args.seed,
                                   path=str(path)))
    process = subprocess.Popen([sys.executable, str(script)])
    try:
        while process.poll() is None:
            if path.exists() and len(EvaluationStore(path)) >= rows:
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    finally:
        process.wait()
    if process.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the first run ended (code {process.returncode}) before the kill")
    return len(EvaluationStore(path))


def solves_to_first_fit(idata) -> tuple[int, int]:
    """(tuning iteration, solves so far) at the first iteration on a surrogate."""
    used = np.asarray(idata.warmup_sample_stats["uses_surrogate"])[0]
    evals = np.asarray(idata.warmup_sample_stats["total_model_evals"])[0]
    i = int(np.argmax(used)) if used.any() else used.size - 1
    return i, int(evals[i])


def quality(idata) -> tuple[float, float]:
    values = np.asarray(posterior_dataset(idata)["theta"])
    values = values.reshape(values.shape[0], values.shape[1], -1)
    ess = min(float(az.ess(values[:, :, j])) for j in range(values.shape[2]))
    return ess, float(np.asarray(idata.sample_stats["fallback"]).mean())


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", type=int, default=20)
    parser.add_argument("--mesh", type=int, default=30)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--kill-at", type=int, default=900)
    parser.add_argument("--second-tunes", default="0,50,1000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare-seeds", type=int, default=0,
                        help="second runs (tune=1000) at this many seeds, tuned on the "
                             "surrogate alone and exactly")
    parser.add_argument("--tag", default="pde")
    parser.add_argument("--out", default=str(DEFAULT_RESULTS_DIR))
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="store_restart_"))
    path = directory / "run.sqlite"
    lines = []

    killed = kill_when(path, args.kill_at, args)
    explored = EvaluationStore(path).explored
    rerun = sample(args, path, args.tune, args.draws, args.seed + 1)
    iteration, new = solves_to_first_fit(rerun)
    lines.append(f"- Killed in tuning with {killed} evaluations in the store ({explored} "
                 f"exploration iterations). The rerun on that store first ran on a surrogate "
                 f"at tuning iteration {iteration}, after {new} new solves: "
                 f"{new / killed:.1%} of the kill point's (target <= 10%).")
    finished = len(EvaluationStore(path))
    lines.append(f"- The rerun finished ({args.tune} + {args.draws}); the store holds "
                 f"{finished} evaluations.")
    alone = sample(args, False, args.tune, args.draws, args.seed + 2)
    ess, fallback = quality(alone)
    lines.append(f"- A run alone, same settings: {int(alone.sample_stats['total_model_evals'].values[0, -1])} "
                 f"solves, min ESS {ess:.0f}, fallback share {fallback:.2f}.")
    runs = [(int(t), SurrogateHMC, args.seed + 3 + int(t)) for t in args.second_tunes.split(",")]
    # tuning on the surrogate alone against exact tuning, same store, same seeds
    runs += [(1000, step_class, args.seed + 100 + i) for i in range(args.compare_seeds)
             for step_class in (SurrogateHMC, ExactTuning)]
    for tune, step_class, seed in runs:
        # each second run on a copy, so that they all start from the finished run's store
        copy = directory / f"second_{tune}_{step_class.__name__}_{seed}.sqlite"
        EvaluationStore(path)._connect().execute(f"VACUUM INTO '{copy}'")
        second = sample(args, copy, tune, args.draws, seed, step_class)
        # everything counted before the first draw's own evaluations: tuning, and the
        # checks when tuning ends (the final fit's tail-jump trials, full-length trials)
        draws = second.sample_stats
        before = int(draws["total_model_evals"].values[0, 0] - draws["model_evals"].values[0, 0])
        ess, fallback = quality(second)
        on_surrogate = (np.isnan(second.warmup_sample_stats["lp"].values).mean()
                        if tune else 0.0)
        lines.append(f"- A second run ({step_class.__name__}, seed {seed}), tune={tune}, "
                     f"{args.draws} draws on the finished store: "
                     f"{before} solves before its first draw (target <= 100; tuning iterations "
                     f"on the surrogate alone: {on_surrogate:.0%}); min ESS {ess:.0f}, "
                     f"fallback share {fallback:.2f}.")
        print(lines[-1], flush=True)
    meta = environment_meta()
    text = "\n".join([
        f"# Restarting from a kept store: {args.tag}", "",
        f"`{' '.join(['python', 'benchmarks/store_restart.py'] + sys.argv[1:])}`", "",
        f"Black-box elliptic PDE, d = {args.modes}, mesh {args.mesh}x{args.mesh}, one chain, "
        f"SurrogateHMC, seed {args.seed}; commit {git_commit()}, {meta['versions']}, "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}.", "", *lines, ""])
    out = Path(args.out) / f"store_restart_{args.tag}.md"
    out.write_text(text)
    print(text)
    return lines


if __name__ == "__main__":
    main()

"""The elliptic PDE inverse problem served by a UM-Bridge server, sampled with SurrogateHMC.

The script starts a UM-Bridge server on 127.0.0.1 in a subprocess (itself, run with
``--serve``): ``umbridge.serve_models`` serving the showcase's PDE forward model
``theta (d) -> u at 121 observation points`` as the model ``"forward"``, evaluation only (a
black box), and a model ``"solves"`` that reports how many PDE solves the server has done.
The PyMC model reaches it through ``pymc_surrogate.umbridge.model_op``. It then samples the
same posterior three ways with SurrogateHMC and the same seed:

* in-process: the forward model as a Python Op in this process (the showcase's black box);
* UM-Bridge, ``cores=1``: every logp is one HTTP request to the server;
* UM-Bridge, ``cores=2``: two chains in two processes against the one server (2 threads).

Printed (and written to ``--out`` as markdown, with the command and the commit): wall
seconds, PDE solves (counted where they happen: in this process, or by the server), min bulk
ESS, solves per effective sample, min ESS per second, max R-hat, the largest difference of the
posterior means from the in-process run in posterior sds, and whether the draws are the
in-process run's (they should be with ``cores=1``: same seed, same model values). The server is stopped at the
end, also on an error.

UM-Bridge has no authentication: the server listens on 127.0.0.1 only.

Run::

    pip install -e ".[umbridge,examples]"
    python examples/umbridge_pde.py                      # d = 20, 30x30 mesh, about a minute
    python examples/umbridge_pde.py --quick              # d = 4, 10x10 mesh, seconds
    python examples/umbridge_pde.py --out benchmarks/results/umbridge_pde.md
"""

from __future__ import annotations

import os

# One BLAS thread before numpy loads (as the showcase): small solves slow down a hundredfold
# when numpy's and scipy's thread pools fight on a small shared machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import functools  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

from benchmarks.models.elliptic_pde import EllipticPDEProblem  # noqa: E402

_QUICK = {"modes": 4, "mesh": 10, "tune": 400, "draws": 300}
_DEFAULT = {"modes": 20, "mesh": 30, "tune": 1000, "draws": 1000}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny problem and short chains")
    p.add_argument("--modes", type=int, help="KL modes d (default 20)")
    p.add_argument("--mesh", type=int, help="elements per side of the FE mesh (default 30)")
    p.add_argument("--tune", type=int, help="tuning iterations per chain (default 1000)")
    p.add_argument("--draws", type=int, help="draws per chain (default 1000)")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--out", type=Path, help="also write the table here, as markdown")
    p.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for key, value in (_QUICK if args.quick else _DEFAULT).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


# ------------------------------------------------------------------ the server (a subprocess)
def serve(port: int, modes: int, mesh: int) -> None:
    """Serve the PDE forward model on 127.0.0.1:``port`` until killed."""
    import umbridge
    from aiohttp import web

    problem = EllipticPDEProblem(n_modes=modes, mesh_size=mesh)

    class Forward(umbridge.Model):
        def get_input_sizes(self, config):
            return [problem.n_modes]

        def get_output_sizes(self, config):
            return [problem.n_obs]

        def __call__(self, parameters, config):
            return [problem.forward(np.asarray(parameters[0])).tolist()]

        def supports_evaluate(self):
            return True

    class Solves(umbridge.Model):
        def get_input_sizes(self, config):
            return [1]

        def get_output_sizes(self, config):
            return [1]

        def __call__(self, parameters, config):
            return [[float(problem.n_forward)]]

        def supports_evaluate(self):
            return True

    # serve_models listens on every interface; UM-Bridge has no authentication: loopback only.
    web.run_app = functools.partial(web.run_app, host="127.0.0.1", print=None)
    # Two model threads: the cores=2 chains are evaluated concurrently.
    umbridge.serve_models([Forward("forward"), Solves("solves")], port=port, max_workers=2)


class LocalServer:
    """This script, serving on a free loopback port, in a subprocess (a context manager)."""

    def __init__(self, modes: int, mesh: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.command = [sys.executable, __file__, "--serve", str(port),
                        "--modes", str(modes), "--mesh", str(mesh)]

    def __enter__(self) -> LocalServer:
        import requests

        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            try:
                requests.get(f"{self.url}/Info", timeout=1)
                return self
            except requests.RequestException:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the UM-Bridge server ({' '.join(self.command)}) did not start")
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ------------------------------------------------------------------ sampling
def pde_model(forward, data: np.ndarray, modes: int):
    """theta ~ N(0, 0.5^2), u_obs ~ N(forward(theta), 0.1^2): the showcase's posterior."""
    import pymc as pm

    with pm.Model() as model:
        theta = pm.Normal("theta", mu=0.0, sigma=0.5, shape=modes)
        pm.Normal("u_obs", mu=forward(theta), sigma=0.1, observed=data)
    return model


def run(label: str, model, solves, *, cores: int, args: argparse.Namespace) -> dict:
    """Sample with SurrogateHMC; ``solves()`` reads the solve counter where solves happen."""
    import arviz as az
    import pymc as pm

    from pymc_surrogate import SurrogateHMC
    from pymc_surrogate.compat import posterior_dataset

    before = solves()
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(step=SurrogateHMC(), tune=args.tune, draws=args.draws, chains=2,
                          cores=cores, random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
    wall = time.perf_counter() - start
    n_solves = solves() - before
    posterior = posterior_dataset(idata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = float(np.min(np.asarray(az.ess(posterior, method="bulk")["theta"])))
        rhat = float(np.max(np.asarray(az.rhat(posterior)["theta"])))
    theta = posterior["theta"].values.reshape(-1, args.modes)
    print(f"  {label}: {wall:.1f} s, {n_solves} solves, min ESS {ess:.0f}", flush=True)
    return {"label": label, "cores": cores, "wall_s": wall, "solves": n_solves, "min_ess": ess,
            "solves_per_ess": n_solves / ess, "ess_per_s": ess / wall, "max_rhat": rhat,
            "theta": theta, "mean": theta.mean(axis=0), "sd": theta.std(axis=0)}


def table(rows: list[dict]) -> str:
    reference = rows[0]
    lines = ["| model | cores | wall s | PDE solves | min ESS | solves/ESS | min ESS/s | max R-hat "
             "| max abs(mean - in-process)/sd | same draws as in-process |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shift = float(np.max(np.abs(r["mean"] - reference["mean"]) / reference["sd"]))
        lines.append(f"| {r['label']} | {r['cores']} | {r['wall_s']:.1f} | {r['solves']} | "
                     f"{r['min_ess']:.0f} | {r['solves_per_ess']:.2f} | {r['ess_per_s']:.1f} | "
                     f"{r['max_rhat']:.3f} | {shift:.3f} | "
                     f"{'yes' if np.array_equal(r['theta'], reference['theta']) else 'no'} |")
    return "\n".join(lines)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(_REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(_REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes in the tree)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> dict:
    """Run the example; returns ``rows`` (one dict per run) and ``markdown``."""
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.modes, args.mesh)
        return {}
    import pymc as pm
    import pytensor
    from threadpoolctl import threadpool_limits

    from benchmarks.models.elliptic_pde import PDEForwardOp, make_data
    from pymc_surrogate.umbridge import model_op

    logging.getLogger("pymc").setLevel(logging.ERROR)
    # PyTensor 3 runs Python Ops in Numba's object mode: microseconds beside a request.
    warnings.filterwarnings("ignore", message="Numba will use object mode")
    started = time.perf_counter()
    data = make_data(n_modes=args.modes).y  # the showcase's data (seeded, 90x90 mesh)
    problem = EllipticPDEProblem(n_modes=args.modes, mesh_size=args.mesh)
    print(f"Elliptic PDE inverse problem, d = {args.modes}, {args.mesh}x{args.mesh} mesh, "
          f"SurrogateHMC, 2 chains x ({args.tune} tune + {args.draws} draws), seed {args.seed}")
    rows = []
    with threadpool_limits(1), LocalServer(args.modes, args.mesh) as server:
        print(f"  UM-Bridge server at {server.url} (pid {server.process.pid})")
        forward = model_op(server.url, "forward")
        solves_op = pytensor.function([], model_op(server.url, "solves")(np.zeros(1)))
        remote_model = pde_model(forward, data, args.modes)
        local_model = pde_model(PDEForwardOp(problem), data, args.modes)
        point = local_model.initial_point()
        assert np.isclose(local_model.compile_logp()(point), remote_model.compile_logp()(point))
        rows.append(run("in-process Op", local_model, lambda: problem.n_forward, cores=1, args=args))
        remote_solves = lambda: int(solves_op()[0])  # noqa: E731
        rows.append(run("UM-Bridge server", remote_model, remote_solves, cores=1, args=args))
        rows.append(run("UM-Bridge server", remote_model, remote_solves, cores=2, args=args))
    command = "python examples/umbridge_pde.py " + " ".join(argv if argv is not None else sys.argv[1:])
    markdown = "\n".join([
        "# UM-Bridge: the elliptic PDE served over HTTP, sampled with SurrogateHMC", "",
        f"`{command.strip()}`", "",
        f"commit {_commit()}; PyMC {pm.__version__}, Python {sys.version.split()[0]}; "
        f"d = {args.modes}, {args.mesh}x{args.mesh} mesh, 2 chains x ({args.tune} tune + "
        f"{args.draws} draws), seed {args.seed}; solves counted where they happen (tuning "
        f"included); whole run {time.perf_counter() - started:.0f} s.", "",
        table(rows), "",
    ])
    print("\n" + markdown)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown)
        print(f"written: {args.out}")
    return {"rows": rows, "markdown": markdown}


if __name__ == "__main__":
    main()

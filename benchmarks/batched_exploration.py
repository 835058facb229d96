"""Black-box exploration one call at a time against in batches on a Dask cluster (issue 36).

Issue 36's third line: exploration on a Dask LocalCluster of 4 workers against a model that
takes 100 ms a call, tuning wall-clock against serial, same posterior::

    PYTHONPATH=. python benchmarks/batched_exploration.py --tag dask4
    PYTHONPATH=. python benchmarks/batched_exploration.py --umbridge --tag umbridge4
    python benchmarks/batched_exploration.py --call-seconds 0.01 --tunes 400 --draws 100 --tag smoke

The model: a correlated Gaussian (d = ``--dim``, condition number 100) behind a black-box Op
that sleeps ``--call-seconds`` a call, as a remote solver would. Rows: SurrogateHMC with
``executor=None`` and with ``executor=Client(LocalCluster(n_workers)).get_executor()``
(``explore_tries`` = the workers), each at every ``--tunes`` value; 2 chains, ``cores=1``,
seed ``--seed`` (1). ``--umbridge``: the same Gaussian served by an UM-Bridge server in a subprocess
(``umbridge.serve_models(..., max_workers=--workers)``, so it answers that many requests
at once) and entered through ``pymc_surrogate.umbridge.model_op``; batches go to a
``ThreadPoolExecutor`` of ``--workers`` threads (each an HTTP client). Columns: ``explore_s`` = wall seconds of the tuning iterations before the first
fit (summed ``perf_counter_diff``), ``tune_s`` = of all tuning iterations, ``first_fit`` =
its iteration per chain, ``calls`` = model calls (tune and draws), ``min_ess``,
``max_rhat``, ``max_z`` = largest |mean - truth| / MCSE, ``sd_ratio`` range, ``max_z_sd`` =
largest |sd - truth| / ArviZ's MCSE of the sd, and ``right`` = R-hat <= 1.01, max_z <= 4 and
max_z_sd <= 4. Output: ``benchmarks/results/batched_exploration_<tag>.{csv,md}``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
import warnings
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.graph.basic import Apply  # noqa: E402
from pytensor.graph.op import Op  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR, environment_meta, format_cell, git_commit,
)
from pymc_surrogate import SurrogateHMC  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

if hasattr(az, "Numba"):  # ArviZ 0.23 + numba: mcse(method="sd") fails (banana_coverage.py)
    az.Numba.disable_numba()

# The Op travels to Dask's worker processes by value, not by this module's import path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SlowGaussianLogp(Op):
    """``log N(x; mean, cov)`` after sleeping ``seconds``: a solver's latency, no gradient."""

    __props__ = ("seconds",)

    def __init__(self, mean: np.ndarray, precision: np.ndarray, seconds: float):
        self.mean, self.precision, self.seconds = mean, precision, float(seconds)

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        time.sleep(self.seconds)
        r = inputs[0] - self.mean
        outputs[0][0] = np.asarray(-0.5 * float(r @ self.precision @ r))


def gaussian(dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    cov = q @ np.diag(np.geomspace(1.0, 0.01, dim)) @ q.T
    return rng.normal(size=dim), cov


def serve(port: int, args) -> None:
    """The UM-Bridge server (run in a subprocess): the Gaussian's log density, slept."""
    import functools

    import umbridge
    from aiohttp import web

    mean, cov = gaussian(args.dim)
    precision = np.linalg.inv(cov)

    class Served(umbridge.Model):
        def get_input_sizes(self, config):
            return [args.dim]

        def get_output_sizes(self, config):
            return [1]

        def __call__(self, parameters, config):
            time.sleep(args.call_seconds)
            r = np.asarray(parameters[0]) - mean
            return [[float(-0.5 * r @ precision @ r)]]

        def supports_evaluate(self):
            return True

    # serve_models binds every interface; UM-Bridge has no authentication: loopback only.
    web.run_app = functools.partial(web.run_app, host="127.0.0.1", print=None)
    umbridge.serve_models([Served("forward")], port=port, max_workers=args.workers)


def start_server(args):
    import socket
    import subprocess

    import requests

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--dim",
                                str(args.dim), "--call-seconds", str(args.call_seconds),
                                "--workers", str(args.workers)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            requests.get(f"{url}/Info", timeout=1)
            return process, url
        except requests.RequestException:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the UM-Bridge server did not start")


def run(args, tune: int, client, url: str | None = None) -> dict:
    mean, cov = gaussian(args.dim)
    if client is None:
        executor = None
    elif url is None:
        executor = client.get_executor()
    else:
        executor = client
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = pm.Flat("x", shape=args.dim, initval=mean + 0.5)
        if url is None:
            loglike = SlowGaussianLogp(mean, np.linalg.inv(cov), args.call_seconds)(x)
        else:
            from pymc_surrogate.umbridge import model_op

            loglike = model_op(url, "forward")(x)[0]
        pm.Potential("likelihood", loglike)
        step = SurrogateHMC(executor=executor, explore_tries=args.workers, store=False)
        idata = pm.sample(draws=args.draws, tune=tune, chains=2, cores=1, step=step,
                          random_seed=args.seed, progressbar=False, discard_tuned_samples=False,
                          compute_convergence_checks=False)
    warm = idata.warmup_sample_stats
    seconds = np.asarray(warm["perf_counter_diff"])
    used = np.asarray(warm["uses_surrogate"])
    first = [int(np.argmax(row)) if row.any() else row.size for row in used]
    values = np.asarray(posterior_dataset(idata)["x"])
    ess = np.array([float(az.ess(values[:, :, j])) for j in range(args.dim)])
    rhat = np.array([float(az.rhat(values[:, :, j])) for j in range(args.dim)])
    flat = values.reshape(-1, args.dim)
    z = (flat.mean(0) - mean) / (flat.std(0) / np.sqrt(ess))
    sd_ratio = flat.std(0) / np.sqrt(np.diag(cov))
    mcse_sd = az.mcse(az.convert_to_dataset({"x": values}), method="sd")["x"].values
    z_sd = (flat.std(0) - np.sqrt(np.diag(cov))) / mcse_sd
    where = "umbridge, " if url else ""
    return {
        "exploration": f"{where}serial" if client is None else
        (f"{where}{args.workers} threads" if url else f"dask {args.workers} workers"),
        "tune": tune,
        "explore_s": float(sum(s[:f].sum() for s, f in zip(seconds, first))),
        "tune_s": float(seconds.sum()),
        "first_fit": " ".join(map(str, first)),
        "calls": int(np.asarray(idata.sample_stats["total_model_evals"])[:, -1].sum()),
        "min_ess": float(ess.min()),
        "max_rhat": float(rhat.max()),
        "max_z": float(np.abs(z).max()),
        "sd_ratio": f"{sd_ratio.min():.2f}-{sd_ratio.max():.2f}",
        "max_z_sd": float(np.abs(z_sd).max()),
        "right": bool(rhat.max() <= 1.01 and np.abs(z).max() <= 4.0 and np.abs(z_sd).max() <= 4.0),
    }


def write(rows: list[dict], args, out: Path) -> None:
    frame = pd.DataFrame(rows)
    frame.to_csv(out.with_suffix(".csv"), index=False)
    meta = environment_meta()
    serial = frame[frame["exploration"].str.endswith("serial")]
    lines = [
        f"# Exploration in batches: {args.tag}", "",
        f"`{' '.join(['python', 'benchmarks/batched_exploration.py'] + sys.argv[1:])}`", "",
        f"Black-box Gaussian, d = {args.dim}, {args.call_seconds * 1000:.0f} ms a call; "
        f"SurrogateHMC, 2 chains x (tune + {args.draws}), cores=1, seed {args.seed}; commit "
        f"{git_commit()}, {meta['versions']}, {_dt.datetime.now():%Y-%m-%d %H:%M}. Seconds "
        "are the tuning iterations' own (`perf_counter_diff`), summed over both chains.", "",
        "| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns),
    ]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(format_cell(v) for v in row.values) + " |")
    if len(serial):
        base = serial.iloc[0]
        lines += ["", f"Against serial exploration at tune={base['tune']} "
                  f"(tuning {base['tune_s']:.1f} s, exploration {base['explore_s']:.1f} s):"]
        for _, row in frame[~frame["exploration"].str.endswith("serial")].iterrows():
            lines.append(f"- {row['exploration']}, tune={row['tune']}: tuning "
                         f"{base['tune_s'] / row['tune_s']:.2f}x shorter, exploration "
                         f"{base['explore_s'] / max(row['explore_s'], 1e-9):.2f}x shorter; "
                         f"{'right' if row['right'] else 'not right'}.")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--call-seconds", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tunes", default="600,200", help="tune values of the batched runs; "
                        "the serial run uses the first")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--umbridge", action="store_true",
                        help="the model behind an UM-Bridge server, batches on threads")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tag", default="dask4")
    parser.add_argument("--out", default=str(DEFAULT_RESULTS_DIR))
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args)
        return []
    out = Path(args.out) / f"batched_exploration_{args.tag}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tunes = [int(t) for t in args.tunes.split(",")]
    if args.umbridge:
        from concurrent.futures import ThreadPoolExecutor

        process, url = start_server(args)
        try:
            rows = [run(args, tunes[0], None, url)]
            write(rows, args, out)
            with ThreadPoolExecutor(args.workers) as pool:
                for tune in tunes:
                    rows.append(run(args, tune, pool, url))
                    print(rows[-1], flush=True)
                    write(rows, args, out)
        finally:
            process.kill()
        print(out.with_suffix(".md").read_text())
        return rows
    import distributed

    rows = [run(args, tunes[0], None)]
    write(rows, args, out)
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        for tune in tunes:
            rows.append(run(args, tune, client))
            print(rows[-1], flush=True)
            write(rows, args, out)
    print(out.with_suffix(".md").read_text())
    return rows


if __name__ == "__main__":
    main()

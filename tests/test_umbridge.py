"""UM-Bridge models sampled against a real server: ``umbridge.serve_models`` in a subprocess
on a free loopback port (this file, run as a script, is the server). No protocol mocks.

The served model is a linear map ``theta -> A theta``; with a Gaussian prior and Gaussian
noise the posterior is Gaussian and known exactly.
"""

from __future__ import annotations

import argparse
import ast
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

if __name__ != "__main__":  # the server process needs umbridge and numpy only
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt
    import pytest
    import requests

    from pymc_surrogate import SurrogateHMC
    from pymc_surrogate.umbridge import UMBridgeError, model_op
    from tests.reliability.helpers import assert_moments

DIM, N_OBS, SIGMA, TAU = 2, 6, 0.5, 1.0
SAMPLE = dict(draws=300, tune=400, chains=2, progressbar=False, random_seed=5,
              compute_convergence_checks=False)


def linear_problem():
    """``A`` (N_OBS x DIM), data ``y``, and the exact posterior mean and covariance."""
    rng = np.random.default_rng(7)
    a = rng.normal(size=(N_OBS, DIM))
    y = a @ np.array([0.7, -0.4]) + SIGMA * rng.normal(size=N_OBS)
    cov = np.linalg.inv(a.T @ a / SIGMA**2 + np.eye(DIM) / TAU**2)
    return a, y, cov @ a.T @ y / SIGMA**2, cov


# ------------------------------------------------------------------ the server (a subprocess)
def serve(port: int, die_after: int | None) -> None:
    import functools

    import umbridge
    from aiohttp import web

    a = linear_problem()[0]
    calls = {"Evaluate": 0, "Gradient": 0}

    def count(kind):
        calls[kind] += 1
        if die_after is not None and calls["Evaluate"] + calls["Gradient"] > die_after:
            os._exit(3)  # the server goes away in the middle of a request

    class Linear(umbridge.Model):
        def __init__(self, name, gradient):
            super().__init__(name)
            self._gradient = gradient

        def get_input_sizes(self, config):
            return [DIM]

        def get_output_sizes(self, config):
            return [N_OBS]

        def __call__(self, parameters, config):
            count("Evaluate")
            time.sleep(config.get("sleep", 0.0))
            if config.get("fail"):
                raise RuntimeError("solver diverged")
            if config.get("fail_every") and calls["Evaluate"] % config["fail_every"] == 0:
                raise RuntimeError("transient failure")  # HTTP 500, every fail_every-th call
            out = a @ np.asarray(parameters[0])
            if config.get("nan"):
                out[0] = np.nan
            return [out.tolist()]

        def gradient(self, out_wrt, in_wrt, parameters, sens, config):
            count("Gradient")
            return (a.T @ np.asarray(sens)).tolist()

        def supports_evaluate(self):
            return True

        def supports_gradient(self):
            return self._gradient

    class Calls(umbridge.Model):
        """Evaluate returns the server's (Evaluate, Gradient) counts so far."""

        def get_input_sizes(self, config):
            return [1]

        def get_output_sizes(self, config):
            return [2]

        def __call__(self, parameters, config):
            return [[float(calls["Evaluate"]), float(calls["Gradient"])]]

        def supports_evaluate(self):
            return True

    # serve_models binds every interface; UM-Bridge has no authentication: loopback only.
    web.run_app = functools.partial(web.run_app, host="127.0.0.1", print=None)
    umbridge.serve_models([Linear("linear", False), Linear("linear_grad", True), Calls("calls")],
                          port=port, max_workers=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The server subprocess: started on a free port, waited for, killed."""

    def __init__(self, die_after: int | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, __file__, str(self.port)]
        if die_after is not None:
            args += ["--die-after", str(die_after)]
        # stderr to a file, not a pipe: aiohttp logs each model error's traceback there, and
        # a pipe nobody reads fills up (64 KB) and blocks the server's event loop.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{self.url}/Info", timeout=1)
                return
            except requests.RequestException:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"UM-Bridge test server did not start: "
                                       f"{self._log_tail()}")
                time.sleep(0.1)

    def calls(self) -> np.ndarray:
        op = model_op(self.url, "calls")
        return pytensor.function([], op(np.zeros(1)))()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait()
        self.log.close()

    def _log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode()[-2000:]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--die-after", type=int)
    args = parser.parse_args()
    serve(args.port, args.die_after)
    sys.exit()


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def server():
    server = Server()
    yield server
    server.stop()


def linear_model(op):
    a, y, _, _ = linear_problem()
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, TAU, shape=DIM)
        pm.Normal("y", mu=op(theta), sigma=SIGMA, observed=y)
    return model


def test_black_box_model_has_no_gradient_and_gradient_model_has_the_servers(server):
    a = linear_problem()[0]
    black_box = model_op(server.url, "linear")
    with_gradient = model_op(server.url, "linear_grad")
    assert (black_box.gradient, with_gradient.gradient) == (False, True)
    assert model_op(server.url, "linear_grad", gradient=False).gradient is False
    x = pt.dvector("x")
    with pytest.raises(Exception, match="black box"):
        pytensor.grad(black_box(x).sum(), x)
    sens = np.arange(1.0, N_OBS + 1)
    vjp = pytensor.function([x], pytensor.grad((with_gradient(x) * sens).sum(), x))
    theta = np.array([0.3, -1.2])
    np.testing.assert_allclose(vjp(theta), a.T @ sens)
    np.testing.assert_allclose(pytensor.function([x], black_box(x))(theta), a @ theta)


@pytest.mark.parametrize(("name", "gradient", "cores"), [
    ("linear", "auto", 1),
    ("linear", "auto", 2),
    ("linear_grad", "auto", 1),
    ("linear_grad", "auto", 2),
    ("linear_grad", False, 1),
])
@pytest.mark.shared_between_generations
def test_samples_the_exact_posterior_from_the_server(server, name, gradient, cores):
    _, _, mean, cov = linear_problem()
    op = model_op(server.url, name, gradient=gradient)
    before = server.calls()
    with linear_model(op):
        step = SurrogateHMC()
        assert step.has_gradient is op.gradient
        idata = pm.sample(step=step, cores=cores, **SAMPLE)
    evaluations, gradients = server.calls() - before
    assert_moments(idata, "theta", mean, np.sqrt(np.diag(cov)))
    # Every logp the chains counted was a request to the server (cores=2: in the workers).
    stats = idata.sample_stats
    assert evaluations >= int(stats.total_model_evals.values[:, -1].sum())
    if op.gradient:
        assert gradients > 0
    else:
        assert gradients == 0  # a black box: the server's gradient was never asked for
    post = idata.posterior["theta"].values
    assert not np.allclose(post[0], post[1])


@pytest.mark.parametrize("cores", [1, 2])
def test_server_killed_mid_run_is_a_clear_error(cores):
    server = Server(die_after=150)
    try:
        op = model_op(server.url, "linear", timeout=30)
        started = time.monotonic()
        with linear_model(op), pytest.raises(Exception) as caught:
            pm.sample(step=SurrogateHMC(), cores=cores, **SAMPLE)
        assert time.monotonic() - started < 60
    finally:
        server.stop()
    assert server.process.returncode == 3  # it died of --die-after, not of the cleanup
    # cores=2: PyMC re-raises in the parent with the worker's traceback as the cause.
    text, err = "", caught.value
    while err is not None:
        text += f"{err}\n"
        err = err.__cause__
    assert f"Lost the UM-Bridge server at {server.url}" in text
    assert "Check that the server is running" in text


def test_hung_server_times_out_naming_the_url():
    server = Server()
    try:
        op = model_op(server.url, "linear", timeout=1.0)
        f = pytensor.function([], op(np.zeros(DIM)))
        f()
        os.kill(server.process.pid, signal.SIGSTOP)  # up, but answers nothing
        started = time.monotonic()
        with pytest.raises(UMBridgeError, match=f"server at {server.url} .*within 1.0 s"):
            f()
        assert time.monotonic() - started < 10
    finally:
        server.stop()


def test_slow_model_within_the_timeout_is_not_an_error(server, monkeypatch):
    import pymc_surrogate.umbridge

    monkeypatch.setattr(pymc_surrogate.umbridge, "DEFAULT_TIMEOUT", 0.2)
    assert model_op(server.url, "linear").timeout == 0.2  # the settable default
    assert model_op(server.url, "linear", timeout=None).timeout is None
    op = model_op(server.url, "linear", config={"sleep": 0.5}, timeout=5.0)
    np.testing.assert_allclose(pytensor.function([], op(np.ones(DIM)))(), linear_problem()[0].sum(axis=1))
    slow = model_op(server.url, "linear", config={"sleep": 0.5}, timeout=0.2)
    with pytest.raises(UMBridgeError, match="within 0.2 s.*larger timeout"):
        pytensor.function([], slow(np.ones(DIM)))()


def test_model_errors_are_named_and_nan_outputs_stay_nan(server):
    failing = model_op(server.url, "linear", config={"fail": True})
    with pytest.raises(UMBridgeError, match=f"server at {server.url} .*HTTP 500"):
        pytensor.function([], failing(np.ones(DIM)))()
    # umbridge's server prints NaN as `nan`, which is not JSON: still read as NaN (a rejection).
    nan = pytensor.function([], model_op(server.url, "linear", config={"nan": True})(np.ones(DIM)))()
    assert np.isnan(nan[0]) and np.all(np.isfinite(nan[1:]))


def test_transient_server_errors_are_retried(server):
    # Every second call fails (HTTP 500): with retries each evaluation gets its answer.
    op = model_op(server.url, "linear", config={"fail_every": 2}, retries=2, timeout=5.0)
    f = pytensor.function([], op(np.ones(DIM)))
    for _ in range(6):
        np.testing.assert_allclose(f(), linear_problem()[0].sum(axis=1))
    once = model_op(server.url, "linear", config={"fail_every": 2}, retries=0, timeout=5.0)
    g = pytensor.function([], once(np.ones(DIM)))
    outcomes = []
    for _ in range(6):
        try:
            g()
            outcomes.append(True)
        except UMBridgeError as err:
            assert "HTTP 500" in str(err)
            outcomes.append(False)
    assert 0 < sum(outcomes) < 6
    with pytest.raises(ValueError, match="retries"):
        model_op(server.url, "linear", retries=-1)


@pytest.mark.parametrize("retries", [0, 2])
@pytest.mark.shared_between_generations
def test_server_failing_one_call_in_fifty_samples_right(server, retries):
    # Without retries each failure is a rejection (stat eval_failures); with them the
    # server's failures are absorbed. Either way the run completes and is right.
    _, _, mean, cov = linear_problem()
    op = model_op(server.url, "linear", config={"fail_every": 50}, retries=retries, timeout=30)
    with linear_model(op):
        idata = pm.sample(step=SurrogateHMC(), cores=1, **SAMPLE)
    assert idata.posterior.sizes["draw"] == SAMPLE["draws"]
    failures = idata.sample_stats["eval_failures"].values[:, -1]
    assert (failures.sum() > 0) == (retries == 0), failures
    assert_moments(idata, "theta", mean, np.sqrt(np.diag(cov)))


def test_unreachable_server_and_unknown_model_are_named(server):
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UMBridgeError, match=f"Lost the UM-Bridge server at {dead}"):
        model_op(dead, "linear")
    with pytest.raises(UMBridgeError, match=r"serves no model 'nope'.*'linear'"):
        model_op(server.url, "nope")
    with pytest.raises(UMBridgeError, match="does not support Gradient"):
        model_op(server.url, "linear", gradient=True)
    with pytest.raises(TypeError, match="vector of length 2"):
        model_op(server.url, "linear")(np.zeros(3))


def test_op_pickles_without_a_connection_and_reconnects(server):
    op = model_op(server.url, "linear_grad", config={"sleep": 0.0}, timeout=5.0)
    theta = np.array([0.5, 2.0])
    pytensor.function([], op(theta))()  # this process's session now holds a socket
    copy = pickle.loads(pickle.dumps(op))
    assert copy == op and hash(copy) == hash(op) and copy.config == {"sleep": 0.0}
    np.testing.assert_allclose(pytensor.function([], copy(theta))(), linear_problem()[0] @ theta)


def _process_pool():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))


@pytest.mark.parametrize("executor", [
    _process_pool,
    # Threads share a process: each must compile its own logp (PyTensor functions are not
    # thread-safe). A shared one gave 45-60 of 100 nodes another node's value on PyTensor 2.
    lambda: ThreadPoolExecutor(2),
], ids=["processes", "threads"])
def test_sparse_grid_precompute_through_an_executor_matches_the_model(server, executor, tmp_path):
    from pymc_surrogate import GridBox
    from pymc_surrogate.step_methods.sparse_grid_hmc import SparseGridHMC
    from pymc_surrogate.surrogates import NaiveGrid

    _, _, mean, cov = linear_problem()
    sd = np.sqrt(np.diag(cov))
    before = server.calls()[0]
    with linear_model(model_op(server.url, "linear")) as model, executor() as pool:
        step = SparseGridHMC(grid=tmp_path / "grid.npz", domain=GridBox(bounds=(mean - 3 * sd, mean + 3 * sd)), surrogate=NaiveGrid(max_nodes=100), executor=pool, progressbar=False)
        step.precompute()  # the constructor evaluates nothing
        logp = model.compile_logp()
    assert server.calls()[0] - before >= step.precompute_["nodes"] > 50
    grid = np.load(tmp_path / "grid.npz")  # the nodes (theta is untransformed) and U there
    np.testing.assert_allclose(grid["values"], [-logp({"theta": q}) for q in grid["nodes"]])


def test_the_documented_examples_run(server, monkeypatch):
    """docs/umbridge.md's code, as written, against this file's server ("linear" for the
    page's "forward", its data for the page's ``data``; short chains on one core)."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "umbridge.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) == 2
    sample = pm.sample
    monkeypatch.setattr(pm, "sample", lambda **kw: sample(**{**kw, "tune": 100, "draws": 100,
                                                             "cores": 1, "progressbar": False}))
    namespace = {"__name__": "umbridge_page", "data": linear_problem()[1]}
    for block in blocks:
        code = block.replace('"http://127.0.0.1:4242", "forward"', f'"{server.url}", "linear"')
        exec(compile(code, str(page), "exec"), namespace)
    assert namespace["idata"].posterior.sizes["draw"] == 100
    assert namespace["step"].precompute_["nodes"] > 0


def test_the_core_package_does_not_import_umbridge():
    from tests.test_layers import PACKAGE, imported_modules

    own = sorted((PACKAGE / "umbridge").glob("*.py"))
    importers = [path.name for path in PACKAGE.rglob("*.py") if path not in own
                 and {"umbridge", "pymc_surrogate.umbridge", "requests"} & imported_modules(path)]
    assert not importers
    # Our package itself imports neither umbridge nor (at import time) requests.
    for path in own:
        tree = ast.parse(path.read_text())
        top_level = {alias.name for node in tree.body
                     if isinstance(node, ast.Import) for alias in node.names}
        top_level |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert "umbridge" not in imported_modules(path) and "requests" not in top_level, path


def test_without_requests_the_error_names_the_extra(monkeypatch):
    """Without ``requests`` (installed with the ``umbridge`` extra), the first request says
    what to install; it was a bare ``ModuleNotFoundError: No module named 'requests'``."""
    import sys

    from pymc_surrogate.umbridge import model_op

    monkeypatch.setitem(sys.modules, "requests", None)  # import requests now fails
    with pytest.raises(ImportError, match=r"pymc-surrogate\[umbridge\]"):
        model_op("http://localhost:9", "forward")

"""Chains that share their evaluations: in tuning, across runs, through a kill."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.evaluation.store import EvaluationStore, StoreMismatchError

SCALES = np.array([1.0, 2.0, 0.5])


class GaussianBlackBox(Op):
    """-sum((x / SCALES)^2) / 2 with no gradient."""

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(-0.5 * np.sum((inputs[0] / SCALES) ** 2))


def black_box_model():
    with pm.Model() as model:
        x = pm.Flat("x", shape=3)
        pm.Potential("likelihood", GaussianBlackBox()(x))
    return model


def first_surrogate_iteration(idata) -> np.ndarray:
    """Per chain, the first tuning iteration whose kernel ran on a surrogate."""
    used = idata.warmup_sample_stats["uses_surrogate"].values
    return np.array([np.argmax(row) if row.any() else row.size for row in used])


def sample(model, store, tune=320, draws=100, chains=3, seed=1, **kwargs):
    with model:
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                         step=SurrogateHMC(store=store), discard_tuned_samples=False,
                         progressbar=False, compute_convergence_checks=False, **kwargs)


def test_later_chains_fit_on_the_evaluations_of_earlier_ones():
    # explore_steps is 300 here: a chain alone fits after 300 exploration iterations; with
    # a shared store the chains after the first have those behind them, and explore only
    # their own quarter (75) from their own start.
    model = black_box_model()
    alone = first_surrogate_iteration(sample(model, store=False))
    shared = first_surrogate_iteration(sample(model, store=None))
    assert np.all(alone >= 300), alone
    assert shared[0] >= 300 and np.all((shared[1:] >= 75) & (shared[1:] <= 77)), shared


def test_chains_in_several_processes_share_one_store_only_when_asked():
    model = black_box_model()
    with model:
        kwargs = dict(draws=50, tune=320, chains=2, cores=2, random_seed=2,
                      discard_tuned_samples=False, progressbar=False,
                      compute_convergence_checks=False)
        own = pm.sample(step=SurrogateHMC(), **kwargs)
        again = pm.sample(step=SurrogateHMC(), **kwargs)
        shared = pm.sample(step=SurrogateHMC(store=EvaluationStore()), **kwargs)
    # By default each process has its own store: the seed fixes the draws.
    assert np.all(first_surrogate_iteration(own) >= 300)
    np.testing.assert_array_equal(own.posterior["x"].values, again.posterior["x"].values)
    # One store for both processes: together they need 300 exploration iterations, not
    # 300 each (how they split them depends on when each process starts).
    assert min(first_surrogate_iteration(shared)) < 250, first_surrogate_iteration(shared)


def test_a_second_run_on_a_kept_store_fits_before_its_first_draw(tmp_path):
    model = black_box_model()
    path = tmp_path / "run.sqlite"
    first = sample(model, store=path, chains=1)
    held = len(EvaluationStore(path))
    assert held == int(first.sample_stats["total_model_evals"].values[0, -1])
    again = sample(model, store=path, tune=0, chains=1, draws=50)
    stats = again.sample_stats
    # the initial point's logp is the only evaluation before the first draw's correction
    assert int(stats["total_model_evals"].values[0, 0]) <= 2
    assert bool(stats["uses_surrogate"].values[0, 0])
    assert len(EvaluationStore(path)) == held + int(stats["total_model_evals"].values[0, -1])


def test_a_rerun_says_what_its_kept_store_brings(tmp_path, caplog):
    model = black_box_model()
    path = tmp_path / "run.sqlite"
    with caplog.at_level("INFO", logger="pymc"), model:
        SurrogateHMC(store=path)
    assert "earlier runs" not in caplog.text  # a new file holds nothing to say
    sample(model, store=path, chains=1)
    held = len(EvaluationStore(path))
    caplog.clear()
    with caplog.at_level("INFO", logger="pymc"), model:
        SurrogateHMC(store=path)
    said = [r.getMessage() for r in caplog.records if "earlier runs" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert f"holds {held} evaluations" in said[0] and "tune on the surrogate alone" in said[0]


def test_a_step_refuses_a_store_of_another_model(tmp_path):
    path = tmp_path / "run.sqlite"
    with black_box_model():
        SurrogateHMC(store=path)
    with pm.Model():
        pm.Normal("y", 0.0, 1.0, shape=3)
        with pytest.raises(StoreMismatchError, match="another model"):
            SurrogateHMC(store=path)


def _data_model():
    with pm.Model() as model:
        y = pm.Data("y", np.zeros(5))
        mu = pm.Flat("mu")
        pm.Potential("likelihood", GaussianBlackBox()(pt.stack([mu - y.mean(), mu, mu])))
    return model


def test_after_set_data_a_chain_learns_from_the_new_data_only():
    """A step sampled again after ``pm.set_data``: its chain's training set holds the new
    posterior's evaluations only (it held the earlier run's too, of the old data: 766
    training points in the second run where the first made 333)."""
    model = _data_model()
    with model:
        step = SurrogateHMC()
    sizes = []
    for shift in (0.0, 4.0):
        with model:
            pm.set_data({"y": np.full(5, shift)})
            idata = pm.sample(draws=100, tune=320, chains=1, cores=1, random_seed=3, step=step,
                              progressbar=False, compute_convergence_checks=False)
        sizes.append(int(idata.sample_stats["training_size"].values.max()))
        # the posterior: precision 1 + 1/4 + 4 (SCALES), mean shift / 5.25, sd 0.44
        mean = idata.posterior["mu"].values.mean()
        assert abs(mean - shift / 5.25) < 0.3, (shift, mean)
    assert sizes[1] < 1.5 * sizes[0], sizes


def test_after_set_data_a_given_store_is_refused(tmp_path):
    model = _data_model()
    with model:
        step = SurrogateHMC(store=tmp_path / "run.sqlite")
        pm.set_data({"y": np.ones(5)})
        with pytest.raises(StoreMismatchError, match=r"data changed \(pm.set_data\)"):
            pm.sample(draws=10, tune=10, chains=1, step=step, progressbar=False)


def test_store_false_keeps_each_chain_alone():
    with black_box_model():
        assert SurrogateHMC(store=False).store is None
        with pytest.raises(TypeError, match="store must be"):
            SurrogateHMC(store=3)


KILLED_RUN = textwrap.dedent("""
    import sys, time
    import numpy as np, pymc as pm, pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op
    from pymc_surrogate import SurrogateHMC

    log = open(sys.argv[2], "a", buffering=1)

    class Logged(Op):
        def make_node(self, x):
            x = pt.as_tensor_variable(x)
            return Apply(self, [x], [pt.dscalar()])
        def perform(self, node, inputs, outputs):
            time.sleep(0.002)  # a model that takes its time
            log.write(" ".join(repr(float(v)) for v in inputs[0]) + "\\n")
            outputs[0][0] = np.asarray(-0.5 * float(np.sum(inputs[0] ** 2)))

    if __name__ == "__main__":
        with pm.Model():
            x = pm.Flat("x", shape=2)
            pm.Potential("l", Logged()(x))
            pm.sample(draws=100000, tune=100000, chains=1, cores=1, progressbar=False,
                      step=SurrogateHMC(store=sys.argv[1]), random_seed=3)
""")


def test_a_killed_run_keeps_every_evaluation_it_made(tmp_path):
    script, path, log = tmp_path / "run.py", tmp_path / "run.sqlite", tmp_path / "calls.txt"
    script.write_text(KILLED_RUN)
    process = subprocess.Popen([sys.executable, str(script), str(path), str(log)],
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 400:
            break
        time.sleep(0.2)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    logged = [np.array(line.split(), dtype=float) for line in log.read_text().splitlines()]
    rows = EvaluationStore(path).read(0, "nobody", 2, 0).positions
    # Every evaluation but the one under way at the kill (logged, not yet stored) is kept;
    # the model's initial-point check (logged, not an evaluation of the step) is not one.
    assert len(logged) - 2 <= len(rows) <= len(logged)
    stored = {tuple(row) for row in rows}
    missing = [q for q in logged[:-1] if tuple(q) not in stored]
    assert len(missing) <= 1, missing[:3]

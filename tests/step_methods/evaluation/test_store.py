"""The evaluation store on its own: rows, readers, processes, the model it belongs to."""

import os
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate.step_methods.evaluation.store import (
    EvaluationStore,
    StoreMismatchError,
    model_key,
)


def _fill(store, writer, n, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, dim))
    for i, q in enumerate(rows):
        store.append(writer, q, float(i), q * 2 if i % 2 else None, None)
    return rows


def test_a_reader_gets_the_others_rows_once_and_never_its_own(tmp_path):
    store = EvaluationStore(tmp_path / "s.sqlite")
    mine = _fill(store, "me", 4)
    theirs = _fill(store, "them", 5, seed=1)
    first = store.read(0, "me", 3, 0)
    np.testing.assert_array_equal(first.positions, theirs)
    np.testing.assert_array_equal(first.potentials, np.arange(5.0))
    # gradients where they were computed, NaN rows where not
    np.testing.assert_array_equal(first.gradients[1], 2 * theirs[1])
    assert np.all(np.isnan(first.gradients[0]))
    assert store.read(first.last_id, "me", 3, 0).potentials.size == 0
    _fill(store, "them", 2, seed=2)
    assert store.read(first.last_id, "me", 3, 0).potentials.size == 2
    assert len(store) == len(mine) + 5 + 2


def test_rows_and_exploration_outlive_the_store_object(tmp_path):
    path = tmp_path / "s.sqlite"
    store = EvaluationStore(path)
    _fill(store, "a", 7)
    store.add_explored(3)
    store.add_explored(2)
    del store
    again = EvaluationStore(path)
    assert len(again) == 7 and again.explored == 5


def _append_in_a_process(store, writer, n):
    _fill(store, writer, n, seed=hash(writer) % 100)
    store.add_explored(n)
    return os.getpid()


@pytest.mark.parametrize("method", ["fork"])  # spawn: the pickling test below
def test_processes_share_a_temporary_store(method):
    store = EvaluationStore()  # a temporary file, named before any process starts
    with ProcessPoolExecutor(2, mp_context=get_context(method)) as pool:
        pids = set(pool.map(_append_in_a_process, [store] * 4, ["a", "b", "c", "d"], [25] * 4))
    assert os.getpid() not in pids
    assert len(store) == 100 and store.explored == 100
    assert store.read(0, "a", 3, 0).potentials.size == 75


def test_processes_that_open_a_new_store_at_once_wait_for_each_other():
    # Six forked processes opening a new file at once: without waiting on the switch to
    # WAL, "database is locked" in 9 of 40 runs (so this fails 98% of the time then).
    for _ in range(15):
        store = EvaluationStore()
        with ProcessPoolExecutor(6, mp_context=get_context("fork")) as pool:
            list(pool.map(_append_in_a_process, [store] * 6, "abcdef", [5] * 6))
        assert len(store) == 30


def test_a_pickled_store_is_the_same_file():
    store = EvaluationStore()
    _fill(store, "a", 3)
    copy = pickle.loads(pickle.dumps(store))
    _fill(copy, "b", 2)
    assert len(store) == 5


def test_a_temporary_store_is_deleted_when_its_process_exits(tmp_path):
    code = (
        "import numpy as np\n"
        "from pymc_surrogate.step_methods.evaluation.store import EvaluationStore\n"
        "s = EvaluationStore(); s.append('a', np.zeros(2), 1.0, None, None)\n"
        "print(s.path)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    path = out.stdout.strip()
    assert path.endswith("evaluations.sqlite")
    assert not os.path.exists(os.path.dirname(path))


def _models():
    with pm.Model() as a:
        pm.Normal("x", 0.0, 1.0, observed=np.array([0.1, 0.2]))
        pm.Normal("mu", 0.0, 1.0)
    with pm.Model() as same:
        pm.Normal("x", 0.0, 1.0, observed=np.array([0.1, 0.2]))
        pm.Normal("mu", 0.0, 1.0)
    with pm.Model() as other_data:
        pm.Normal("x", 0.0, 1.0, observed=np.array([0.1, 0.3]))
        pm.Normal("mu", 0.0, 1.0)
    return a, same, other_data


def test_the_model_key_sees_the_data_not_the_object():
    keys = [model_key(m, m.value_vars, m.logp()) for m in _models()]
    assert keys[0] == keys[1]
    assert keys[0] != keys[2]


def test_a_store_refuses_another_model_and_says_what_to_do(tmp_path):
    a, same, other = _models()
    path = tmp_path / "s.sqlite"
    EvaluationStore(path).bind(model_key(a, a.value_vars, a.logp()), 1, 0, "mu()")
    EvaluationStore(path).bind(model_key(same, same.value_vars, same.logp()), 1, 0, "mu()")
    with pytest.raises(StoreMismatchError, match="another model.*own path"):
        EvaluationStore(path).bind(model_key(other, other.value_vars, other.logp()), 1, 0, "mu()")
    # a user's key overrides the graph's
    EvaluationStore(tmp_path / "k.sqlite", key="pde-v1").bind("x", 1, 0, "mu()")
    EvaluationStore(tmp_path / "k.sqlite", key="pde-v1").bind("y", 1, 0, "mu()")
    with pytest.raises(StoreMismatchError):
        EvaluationStore(tmp_path / "k.sqlite", key="pde-v2").bind("x", 1, 0, "mu()")


def test_a_file_that_is_no_store_is_named(tmp_path):
    """A damaged or non-SQLite file: an error that names the file and the way out (it was
    SQLite's bare ``DatabaseError: file is not a database``)."""
    path = tmp_path / "run.sqlite"
    path.write_bytes(b"not a database, just text that happens to be long enough" * 20)
    with pytest.raises(StoreMismatchError, match="is not an evaluation store") as raised:
        EvaluationStore(path).bind("k", 2, 0, "x(2,)")
    assert str(path) in str(raised.value) and "delete the file" in str(raised.value)


_OP_SOURCE = '''
import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op


class ScriptLogp(Op):
    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(-0.5 * float(np.sum(inputs[0] ** 2)))
'''


def _key_with_op_from(module_name: str) -> str:
    namespace = {"__name__": module_name}
    exec(_OP_SOURCE, namespace)
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", namespace["ScriptLogp"]()(x))
    return model_key(model, model.value_vars, model.logp())


def test_the_same_op_defined_in_a_script_or_imported_is_the_same_model():
    """The key ignores the module an Op's class lives in: defined in the script one run
    (``__main__``) and imported from a module the next, it is the same model."""
    assert _key_with_op_from("__main__") == _key_with_op_from("my_solver")


def test_a_mismatched_file_names_the_key_it_holds(tmp_path):
    path = tmp_path / "run.sqlite"
    EvaluationStore(path).bind("held-key", 2, 0, "x(2,)")
    with pytest.raises(StoreMismatchError, match="key='held-key'"):
        EvaluationStore(path).bind("other-key", 2, 0, "x(2,)")

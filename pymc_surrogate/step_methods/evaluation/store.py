"""One store of a model's evaluations, shared by every chain and kept across runs.

Every finite model evaluation a step makes (position, potential, gradient if any, the rest
of the model's values for a block of a compound step) goes into the store, from every
chain. In tuning a chain fits its surrogate on all chains' evaluations; after tuning each
chain freezes its own surrogate, so the draws stay exact. The store also counts the
exploration iterations all chains ran, so a chain fits once the chains *together* have
explored enough, and a run given the store of an earlier one fits before its first draw.

The store is an SQLite file in WAL mode, one committed row per evaluation: a run killed at
any moment (SIGKILL included) keeps every evaluation made before it, and several processes
(``cores > 1``, forked or spawned) write and read it at once. Given a path, the file stays
after the run and a later run given the same path starts from it; by default it is a
temporary file, made at the first evaluation and deleted when the process that made the
step exits. SQLite is in Python's standard library, process-safe and crash-safe by design;
diskcache would add a dependency for a key-value store we would still have to index, and
zarr is not built for many small concurrent appends. A row costs about 20 microseconds.

The store records which model it belongs to (a hash of the block's variables, the model's
logp graph and its data, or a user key) and refuses another model.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from typing import NamedTuple

import numpy as np

__all__ = ["EvaluationStore", "StoredRows", "StoreMismatchError", "model_key"]

#: Temporary stores' directories, by the process that named them (only it deletes them).
_TEMPORARY: dict[str, int] = {}


def _temporary_path() -> str:
    directory = os.path.join(tempfile.gettempdir(), f"pymc_surrogate_store_{uuid.uuid4().hex}")
    _TEMPORARY[directory] = os.getpid()
    return os.path.join(directory, "evaluations.sqlite")


@atexit.register
def _remove_temporary_stores() -> None:
    for directory, pid in _TEMPORARY.items():
        if pid == os.getpid():
            shutil.rmtree(directory, ignore_errors=True)


class StoreMismatchError(ValueError):
    """The store holds evaluations of another model (or block, or dimension)."""


#: How long a process waits for another's lock before the store gives up.
_BUSY_SECONDS = 60.0


def _set_up(connection: sqlite3.Connection) -> None:
    # WAL persists in the file: switching a new file is one process's job, and the others
    # find it done (switching again would need the lock another process holds).
    if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        connection.execute("PRAGMA journal_mode=WAL")
    # NORMAL: a committed row survives the process's death (not a power cut).
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.executescript(_SCHEMA)


def _when_unlocked(action):
    """Run ``action``, again while another process holds the lock it needs.

    SQLite's busy timeout does not cover switching a file to WAL: processes that opened a
    new store at once failed with "database is locked" (6 forked writers: 9 of 40 runs).
    """
    deadline, delay = time.monotonic() + _BUSY_SECONDS, 0.001
    while True:
        try:
            return action()
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(2.0 * delay, 0.1)


class StoredRows(NamedTuple):
    """Rows read from the store (NaN gradient rows where none was computed)."""

    positions: np.ndarray  # (n, d)
    potentials: np.ndarray  # (n,)
    gradients: np.ndarray  # (n, d)
    contexts: np.ndarray  # (n, context_dim)
    last_id: int  # read on from here next time


_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    writer TEXT NOT NULL,
    position BLOB NOT NULL,
    potential REAL NOT NULL,
    gradient BLOB,
    context BLOB
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class EvaluationStore:
    """The evaluations of one model's chains, shared across chains and runs.

    Parameters
    ----------
    path : str or os.PathLike, optional
        An SQLite file (created if missing): evaluations survive the run, a kill included,
        and a later run given the same path starts from them. Default: a temporary file
        for this run's chains, deleted when the process that made the store exits.
    key : str, optional
        Names the model the store belongs to. Default: a hash of the sampled block's
        variables, the model's logp graph and its data (``model_key``). Give your own when
        the graph cannot tell two models apart (an external model behind an Op whose
        behaviour changes without its graph changing), or to reuse a store across an
        edit that does not change the posterior.
    per_process : bool
        A temporary store shared only by the chains of one process (the steps' default,
        ``store=None``): chains that run at once in several processes then learn alone, so
        that ``random_seed`` still fixes every draw. Chains in several processes that share
        one store read each other's evaluations as they come, and what a chain reads, so its
        draws, then depends on the processes' timing.

    Examples
    --------
    >>> store = EvaluationStore("pde_run.sqlite")  # doctest: +SKIP
    >>> with model:  # doctest: +SKIP
    ...     idata = pm.sample(step=SurrogateHMC(store=store), cores=4)
    ...     more = pm.sample(draws=1000, tune=50, step=SurrogateHMC(store=store))
    """

    def __init__(self, path: str | os.PathLike | None = None, *, key: str | None = None,
                 per_process: bool = False):
        self.kept = path is not None
        # A temporary file's name is chosen now, so that chains in forked processes, which
        # copy this object before any row exists, all open the same file.
        self.path = os.fspath(path) if self.kept else _temporary_path()
        self.user_key = key
        self.per_process = per_process and not self.kept
        self._connection: sqlite3.Connection | None = None
        self._pid = os.getpid()

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():
            if self.per_process and self._pid != os.getpid():
                # A store of one process's chains: a worker process starts its own.
                self.path = _temporary_path()
            # A connection must not cross a fork: every process opens its own.
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None)
            try:
                _when_unlocked(lambda: _set_up(connection))
            except sqlite3.DatabaseError as err:
                connection.close()
                raise StoreMismatchError(
                    f"the file {self.path!r} is not an evaluation store (SQLite: {err}): it is "
                    "damaged or another kind of file. Give the step another path, or delete "
                    "the file to start afresh."
                ) from err
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_connection"] = None
        return state

    # --------------------------------------------------------- the model it is for
    def bind(self, key: str, dim: int, context_dim: int, description: str) -> None:
        """Claim the store for a model; refuse one that holds another model's evaluations.

        Parameters
        ----------
        key : str
            The model's key (``model_key``), unless the user gave the store its own.
        dim, context_dim : int
            Sizes of a row's position and context.
        description : str
            The block's variables, for the error message.
        """
        wanted = {"key": self.user_key or key, "dim": str(dim), "context_dim": str(context_dim),
                  "variables": description}
        held = self._read_meta()
        for name in ("key", "dim", "context_dim"):
            if name in held and held[name] != wanted[name]:
                where = f"the file {self.path!r}" if self.kept else "this store"
                same = (f" or, if the model is the same and only its graph changed, "
                        f"EvaluationStore({self.path!r}, key={held['key']!r})"
                        if name == "key" and self.kept else "")
                raise StoreMismatchError(
                    f"{where} holds evaluations of another model (its variables: "
                    f"{held.get('variables', '?')}; this step samples {description}; "
                    f"{name} differs). A store belongs to one model: give this model its "
                    f"own path, delete the file to start afresh{same}."
                )
        self._write_meta({k: v for k, v in wanted.items() if k not in held})

    def _read_meta(self) -> dict[str, str]:
        return dict(self._connect().execute("SELECT name, value FROM meta").fetchall())

    def _write_meta(self, values: dict[str, str]) -> None:
        connection = self._connect()
        with connection:
            connection.execute("BEGIN")
            for name, value in values.items():
                connection.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (name, value))

    # ------------------------------------------------------------ rows
    @staticmethod
    def new_writer() -> str:
        """A chain's name in the store: it reads everyone's rows but its own."""
        return uuid.uuid4().hex

    def append(self, writer: str, q: np.ndarray, potential: float,
               grad: np.ndarray | None, context: np.ndarray | None) -> None:
        """Keep one evaluation (committed at once on disk: a kill loses nothing before it)."""
        row = (writer, np.asarray(q, dtype=np.float64).tobytes(), float(potential),
               None if grad is None else np.asarray(grad, dtype=np.float64).tobytes(),
               None if context is None or np.size(context) == 0
               else np.asarray(context, dtype=np.float64).tobytes())
        self._connect().execute(
            "INSERT INTO evaluations (writer, position, potential, gradient, context) "
            "VALUES (?, ?, ?, ?, ?)", row)

    def read(self, after: int, exclude_writer: str, dim: int, context_dim: int) -> StoredRows:
        """Every row after id ``after`` that ``exclude_writer`` did not write."""
        found = self._connect().execute(
            "SELECT id, position, potential, gradient, context FROM evaluations "
            "WHERE id > ? AND writer != ? ORDER BY id", (after, exclude_writer)).fetchall()
        last = max([after] + [row[0] for row in found])
        n = len(found)
        positions, gradients = np.full((n, dim), np.nan), np.full((n, dim), np.nan)
        contexts, potentials = np.zeros((n, context_dim)), np.empty(n)
        for i, (_, position, potential, gradient, context) in enumerate(found):
            positions[i] = np.frombuffer(position)
            potentials[i] = potential
            if gradient is not None:
                gradients[i] = np.frombuffer(gradient)
            if context is not None and context_dim:
                contexts[i] = np.frombuffer(context)
        return StoredRows(positions, potentials, gradients, contexts, last)

    def __len__(self) -> int:
        return int(self._connect().execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    # ------------------------------------------------------------- counters
    def _add(self, counter: str, amount: int) -> None:
        self._connect().execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
            "SET value = CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER)",
            (counter, str(amount)))

    def _count(self, counter: str) -> int:
        row = self._connect().execute("SELECT value FROM meta WHERE name = ?", (counter,)).fetchone()
        return 0 if row is None else int(row[0])

    def add_explored(self, steps: int = 1) -> None:
        """Count exploration iterations (exact kernel steps in tune) of any chain."""
        self._add("explored", steps)

    @property
    def explored(self) -> int:
        """Exploration iterations all chains have run, this run and earlier ones."""
        return self._count("explored")

    def add_tuned(self) -> None:
        """Count a chain that ended tuning with a surrogate."""
        self._add("tuned", 1)

    @property
    def tuned(self) -> int:
        """Chains, of this run and earlier ones, that ended tuning with a surrogate."""
        return self._count("tuned")

    def __repr__(self) -> str:
        where = self.path if self.kept else "temporary"
        return (f"EvaluationStore({where!r}, {len(self)} evaluations, {self.explored} "
                f"explored, {self.tuned} tuned)")


def model_key(model, value_vars, compile_graph) -> str:
    """A hash of what makes the posterior: the block's variables, the logp graph's
    structure, its constants and shared values (the data), and its Ops' parameters.

    ``compile_graph`` is the model's logp graph (a PyTensor variable).
    """
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant

    from pymc_surrogate.compat import ancestors, io_toposort

    digest = hashlib.sha256()
    for var in value_vars:
        digest.update(f"{var.name}:{var.type}".encode())
    inputs = list(ancestors([compile_graph]))
    for node in io_toposort([i for i in inputs if i.owner is None], [compile_graph]):
        # The Op's class and parameters, never its repr: a default repr holds a memory
        # address, which would make every run a new model. Not the class's module: the
        # same Op defined in a script one run and imported from a module the next is
        # the same model.
        op = node.op
        digest.update(type(op).__qualname__.encode())
        if getattr(op, "__props__", None):
            digest.update(repr(op._props_dict()).encode())
    for var in inputs:
        if isinstance(var, Constant):
            digest.update(np.ascontiguousarray(var.data).tobytes())
        elif isinstance(var, SharedVariable):
            digest.update(np.ascontiguousarray(var.get_value(borrow=True)).tobytes())
    return digest.hexdigest()


def model_data(compile_graph) -> list:
    """The shared variables the logp graph reads: the model's data (``pm.Data``), which
    ``pm.set_data`` changes without changing the graph."""
    from pytensor.compile.sharedvalue import SharedVariable

    from pymc_surrogate.compat import ancestors

    return [var for var in ancestors([compile_graph]) if isinstance(var, SharedVariable)]


def data_fingerprint(data) -> str:
    """A hash of the current values of ``data`` (``model_data``), read in place: it runs
    at every chain's start, and a large data set is not copied for it."""
    digest = hashlib.sha256()
    for var in data:
        digest.update(memoryview(np.ascontiguousarray(var.get_value(borrow=True))).cast("B"))
    return digest.hexdigest()

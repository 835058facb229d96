"""The model's logp at many points at once: in this process or on any executor.

SparseGridHMC's precompute evaluates every grid node before sampling; the batched
exploration of black boxes goes through the same layer. Points are sent in chunks to any object
with ``submit`` (a ``concurrent.futures.Executor``, ``distributed.Client.get_executor()``)
or ``map``; the model travels as cloudpickle bytes and is compiled once per worker thread.
A point whose evaluation raises is retried once; what still fails is returned, never
raised here, so that the caller can name its points in its own terms.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import cloudpickle
import numpy as np

from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions

__all__ = ["BatchResult", "EXECUTOR_LEFT_BEHIND", "INFINITE", "SERIAL", "evaluate_logp",
           "exploration_executor", "refuse_in_a_rerun_script"]

SERIAL = ("serial", None)
#: executor="auto" evaluates in worker processes only past this many seconds of serial
#: evaluation: spawning workers and compiling the model in each costs seconds.
PARALLEL_AFTER = 10.0
#: A point's failure message when its logp is +inf: never retried (an infinite density).
INFINITE = "logp = +inf (an infinite density: fix the model there)"
#: What a script evaluated in "process" workers needs (they are started with "spawn").
GUARD_ADVICE = (
    "Put the code that samples under `if __name__ == \"__main__\":` (Python's "
    "multiprocessing docs, 'Safe importing of main module'), or evaluate in this process: "
    "executor='serial', or threads, executor=concurrent.futures.ThreadPoolExecutor()."
)

#: Warned at a chain's first exploration where the executor did not pickle into the chain's
#: process.
EXECUTOR_LEFT_BEHIND = (
    "the executor stayed in the parent process (it does not travel to PyMC's worker "
    "processes), so this chain explores one model call at a time. Sample with cores=1 to "
    "explore in batches on the executor."
)


def refuse_in_a_rerun_script(owner: str) -> None:
    """Stop a worker process that is running the user's script again from the top.

    ``executor="process"`` starts its workers with "spawn", which imports the parent's
    main script in each; a script without a ``__main__`` guard then builds the model and a
    step again in every worker, which started sampling on its own (a served 20-d model got
    6 315 calls, 1 346 of them from workers that re-ran the script) until Python stopped the
    workers. While a spawned process imports the main script, multiprocessing marks it as
    inheriting: a step (or a served model) made then raises with the fix instead.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"{owner}: this process is a worker started with multiprocessing's 'spawn' or "
            "'forkserver' (by executor='process', or by pm.sample with cores > 1), and it is "
            "running your script again from the top, because the script samples when it is "
            f"imported. {GUARD_ADVICE}"
        )


@dataclass
class BatchResult:
    """``logp`` at each point (NaN where it failed), the points retried, the evaluations
    spent timing the batch (``executor`` or ``progressbar`` "auto"), and the failures that
    remained after the retry (row -> message)."""

    logp: np.ndarray
    retried: int = 0
    timed: int = 0
    errors: dict[int, str] = field(default_factory=dict)


def _serial_seconds(logp: Callable[[np.ndarray], float], points: np.ndarray) -> float:
    """The batch's serial time, judged from one timed logp."""
    started = time.perf_counter()
    try:
        logp(points[0])
    except Exception:  # noqa: BLE001 - the batch reports failed points itself
        pass
    return (time.perf_counter() - started) * points.shape[0]


def evaluate_logp(
    points: np.ndarray,
    functions: ModelFunctions,
    model,
    vars,
    *,
    executor="auto",
    max_workers: int | None = None,
    progressbar: bool | str = True,
    label: str = "Model evaluations",
    owner: str = "pymc_surrogate",
    node_logp: _NodeLogp | None = None,
) -> BatchResult:
    """The model's logp at each row of ``points`` (the sampler's unconstrained space).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    functions : ModelFunctions
        The step's compiled functions, used in this process.
    model, vars
        What worker processes compile (pickled once for the whole batch).
    executor : "auto", "process", "serial", None or an object with ``submit`` or ``map``
        "process": a spawn ``ProcessPoolExecutor`` of ``max_workers`` processes (default
        the CPU count), created and shut down here.
    max_workers : int, optional
    progressbar : bool or "auto"
        "auto": shown when the batch would take more than ``PARALLEL_AFTER`` seconds
        serially (one timed logp), so a cheap model's batch prints nothing.
    label : str
        The progress bar's text.
    owner : str
        Who asks, named in errors.
    node_logp : optional
        The model as workers compile it (``_NodeLogp.from_model``), when the caller keeps
        one for many batches (an exploration batch an iteration): pickling the model for
        each would cost more than a cheap batch.

    Returns
    -------
    BatchResult
        ``-inf`` and NaN values are returned as they are (outside the support: not a
        failure); ``+inf`` is a failure with the message ``INFINITE``, never retried.
    """
    n = points.shape[0]
    timed = int(progressbar == "auto" or executor == "auto")
    if timed:
        seconds = _serial_seconds(functions.logp, points)
        if progressbar == "auto":
            progressbar = seconds > PARALLEL_AFTER
        if executor == "auto":
            executor = "process" if seconds > PARALLEL_AFTER else "serial"
    if executor == "process" and multiprocessing.current_process().daemon:
        # In a PyMC worker process (pm.sample with cores > 1, where SparseGridHMC builds
        # its grid at the end of the warm-up): a daemonic process cannot start a pool, and
        # the chains already run in parallel.
        executor = "serial"
    close = None
    if executor in SERIAL:
        run = _serial_runner(_LocalLogp(functions))
    else:
        function = node_logp or _NodeLogp.from_model(model, vars, owner,
                                                     functions.shared_values())
        if executor == "process":
            workers = max_workers or os.cpu_count() or 1
            executor = close = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_end_with_parent,
            )
        run = _executor_runner(executor, function)
    chunks = _chunks(n, _chunk_size(n, executor, max_workers))
    result = BatchResult(np.full(n, np.nan), timed=timed)
    try:
        with _Progress(progressbar, n, label) as progress:
            for rows, values in run([points[r] for r in chunks], chunks):
                _record(result, rows, values)
                progress.advance(len(rows))
        retry = [i for i in sorted(result.errors) if result.errors[i] != INFINITE]
        if retry:
            result.retried = len(retry)
            for i in retry:
                del result.errors[i]
            for rows, values in run([points[[i]] for i in retry], [[i] for i in retry]):
                _record(result, rows, values)
    except BrokenProcessPool as err:
        raise RuntimeError(
            f"{owner}: the worker processes that evaluate the model stopped while starting "
            f"({err}). The usual cause: the script has no `if __name__ == \"__main__\":` "
            f"guard, so each worker ran it again from the top. {GUARD_ADVICE}"
        ) from err
    finally:
        if close is not None:
            close.shutdown(wait=True)
    return result


def _record(result: BatchResult, rows, values) -> None:
    for row, (value, error) in zip(rows, values):
        result.logp[row] = value
        if error is not None:
            result.errors[row] = error


def _chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]


def _chunk_size(n: int, executor, max_workers: int | None) -> int:
    if executor in SERIAL:
        return max(1, n)
    workers = max_workers or os.cpu_count() or 1
    return max(1, int(np.ceil(n / (4 * workers))))


def _end_with_parent() -> None:
    """A pool worker's initializer: the worker ends when the process that made the pool
    does, busy or idle. After ``kill -9`` of a run, a worker went on calling the model for
    the rest of its chunk, then waited for work for ever."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (parent.join(), os._exit(1)), daemon=True).start()


def _evaluate_rows(logp, points: np.ndarray) -> list[tuple[float, str | None]]:
    """``logp`` at each row; a failure is a (NaN, message) entry, never an exception."""
    out = []
    for q in points:
        try:
            value = float(logp(q))
        except Exception as err:  # noqa: BLE001 - reported with the point's coordinates
            out.append((np.nan, f"{type(err).__name__}: {err}"))
            continue
        if value == np.inf:
            out.append((np.nan, INFINITE))
        else:
            out.append((value, None))  # -inf / NaN: outside the support, not a failure
    return out


class _LocalLogp:
    """The step's own compiled logp (no pickling)."""

    def __init__(self, functions: ModelFunctions):
        self.functions = functions

    def __call__(self, points: np.ndarray):
        return _evaluate_rows(self.functions.logp, points)


#: Per worker thread: compiled logp functions by payload digest (compiled once each). Per
#: thread, not per process: a compiled PyTensor function keeps its inputs and outputs in
#: shared storage, so threads sharing one (a ThreadPoolExecutor, a Dask worker's threads)
#: returned each other's values (PyMC 5: 45-60 of 100 nodes wrong).
_WORKER_CACHE = threading.local()
#: One compilation at a time in a process: PyTensor sets the global ``config.mode`` while it
#: rewrites a graph (``config.change_flags`` in ``FunctionMaker``), and two threads that
#: interleave restore each other's value: after a thread pool compiled a black box with the
#: C backend, every later function of the process compiled with C (PyMC 6's other draws
#: changed).
_COMPILE_LOCK = threading.Lock()


class _NodeLogp:
    """A picklable evaluator: the model as cloudpickle bytes, compiled lazily in the
    worker (once per thread)."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.key = hash(payload)

    @classmethod
    def from_model(cls, model, vars, owner: str, values: dict | None = None) -> _NodeLogp:
        """The model's logp in ``vars`` at ``values`` of the variables outside them (by
        name; the rest at the model's initial point).

        Inside a CompoundStep the other blocks' values are the step's current ones
        (``ModelFunctions.shared_values``), so that worker processes evaluate the same
        conditional as this process: the draws do not depend on where the nodes ran.
        """
        point = {**model.initial_point(), **(values or {})}
        try:
            payload = cloudpickle.dumps((model, [v.name for v in vars], point))
        except Exception as err:
            raise TypeError(
                f"{owner}: the model does not pickle ({type(err).__name__}: {err}), so its logp "
                "cannot be evaluated in executor worker processes. Either evaluate in this "
                "process (executor='serial'), or make the model picklable: keep "
                "unpicklable resources (open files, locks, solver or client handles) out of "
                "the attributes of your Ops and create them lazily inside perform(), e.g. "
                "in a module-level cache of each worker."
            ) from err
        return cls(payload)

    def _logp(self):
        cache = _WORKER_CACHE.__dict__
        logp = cache.get(self.key)
        if logp is None:
            model, names, point = cloudpickle.loads(self.payload)
            by_name = {v.name: v for v in model.value_vars}
            with _COMPILE_LOCK:
                functions = ModelFunctions(model, [by_name[name] for name in names], point,
                                           use_gradient=False)
            logp = cache[self.key] = functions.logp
        return logp

    def __call__(self, points: np.ndarray):
        return _evaluate_rows(self._logp(), points)


def _serial_runner(function) -> Callable[..., Iterator]:
    def run(batches, rows):
        for batch, index in zip(batches, rows):
            yield index, function(batch)
    return run


def _executor_runner(executor, function) -> Callable[..., Iterator]:
    """Yield (rows, results) as the chunks finish: ``submit`` where the executor has it,
    else ``map`` (in order)."""
    def run(batches, rows):
        if hasattr(executor, "submit"):
            futures = {executor.submit(function, batch): index for batch, index in zip(batches, rows)}
            try:
                for future in as_completed(futures):
                    index = futures[future]
                    try:
                        yield index, future.result()
                    except BrokenProcessPool:  # no worker left: evaluate_logp says why
                        raise
                    except Exception as err:  # noqa: BLE001 - the whole chunk failed
                        message = f"{type(err).__name__}: {err}"
                        yield index, [(np.nan, message)] * len(index)
            finally:
                for future in futures:
                    future.cancel()
        else:
            yield from zip(rows, executor.map(function, batches))
    return run


class _Progress:
    """A rich progress bar over the evaluations (or nothing)."""

    def __init__(self, show: bool, total: int, label: str):
        self.show, self.total, self.label = show, total, label

    def __enter__(self):
        if self.show:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeRemainingColumn,
            )

            self._bar = Progress(self.label, BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn())
            self._bar.__enter__()
            self._task = self._bar.add_task("evaluate", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self.show:
            self._bar.advance(self._task, n)

    def __exit__(self, *exc):
        if self.show:
            self._bar.__exit__(*exc)
        return False


def exploration_executor(executor, explore_tries, context_dim: int, owner: str,
                         pseudo_marginal: bool = False):
    """Validated ``(executor, explore_tries)`` of a step's batched exploration.

    ``executor`` is None or "serial" (one call at a time) or an object with ``submit`` or
    ``map`` (a ``concurrent.futures.Executor``, ``distributed.Client(...).get_executor()``).
    Workers compile the whole model, so the step must sample all of it.
    """
    if executor in (None, "serial"):
        return None, int(explore_tries)
    if not (hasattr(executor, "submit") or hasattr(executor, "map")):
        raise ValueError(
            f"{owner}: executor must be None (exploration one model call at a time) or an "
            "object with submit or map (a concurrent.futures.Executor, a Dask client's "
            f"get_executor()); got {executor!r}."
        )
    if pseudo_marginal:
        # Multiple tries weigh each proposal by its logp; with a noisy estimate that is not
        # the scheme whose exactness is tested.
        raise ValueError(f"{owner}: exploration in batches needs an exact logp; with "
                         "pseudo_marginal=True it explores one call at a time (executor=None).")
    if context_dim:
        raise ValueError(
            f"{owner}: an executor evaluates the whole model in its workers, but this step "
            "samples a block of it inside a CompoundStep. Give it every continuous "
            "variable, or drop the executor."
        )
    return executor, int(explore_tries)

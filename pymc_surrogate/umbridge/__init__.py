"""UM-Bridge model servers in PyMC models: a PyTensor Op that evaluates a model over HTTP.

`UM-Bridge <https://um-bridge-benchmarks.readthedocs.io>`_ serves a model (a PDE solver, a
simulator) behind six HTTP endpoints. :func:`model_op` turns one served model into an Op whose
inputs and outputs are the model's vectors. A model that does not support ``Gradient`` is a
black box: the Op has no gradient, ``pytensor.grad`` raises, and the step methods sample it
without ever asking the server for one. A model that supports it gets its vector-Jacobian
product from the server's ``Gradient`` endpoint.

The client speaks UM-Bridge's protocol (version 1.0) with ``requests`` rather than through
``umbridge.HTTPModel``: that client sets no timeout (a hung server hangs the sampler forever),
connects when it is built (so it cannot be pickled to worker processes unconnected), and its
``umbridge.pymc.UmbridgeOp`` always declares a gradient. Install with
``pip install pymc-surrogate[umbridge]``; ``import pymc_surrogate`` never imports this module.

UM-Bridge has no authentication: whoever reaches the port can run the model. Serve on the
loopback or a trusted network only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.graph.basic import Apply

from pymc_surrogate.compat import VJPOp
from pymc_surrogate.step_methods.evaluation.batch import refuse_in_a_rerun_script
from pymc_surrogate.umbridge.client import DEFAULT_RETRIES, Client, UMBridgeError

__all__ = ["DEFAULT_RETRIES", "DEFAULT_TIMEOUT", "UMBridgeError", "UMBridgeOp", "model_op"]

#: Seconds to wait for one answer of the server (an evaluation included) when ``model_op``
#: is given no ``timeout``. Set it before creating the Op: each Op keeps its own.
DEFAULT_TIMEOUT: float = 600.0




def model_op(
    url: str,
    name: str = "forward",
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float | None | Literal["default"] = "default",
    gradient: bool | Literal["auto"] = "auto",
    retries: int | None = None,
) -> UMBridgeOp:
    """A PyTensor Op that evaluates the UM-Bridge model ``name`` served at ``url``.

    Asks the server once, now, which models it serves, what ``name`` supports and the sizes
    of its inputs and outputs; every later evaluation is one HTTP request.

    Parameters
    ----------
    url : str
        The server, e.g. ``"http://127.0.0.1:4242"``.
    name : str
        The model's name on the server (UM-Bridge's convention: ``"forward"``).
    config : mapping, optional
        UM-Bridge's ``config``, sent with every request (JSON-serialisable).
    timeout : float, None or "default"
        Seconds to wait for each answer, an evaluation included; past it sampling stops with
        a :class:`UMBridgeError`. ``"default"``: :data:`DEFAULT_TIMEOUT` (600 s); ``None``
        waits forever. A server that has gone away is reported at once, whatever the timeout.
    gradient : bool or "auto"
        ``"auto"``: use the server's ``Gradient`` if the model supports it, else the Op is a
        black box. ``False``: a black box even if the server has a gradient. ``True``: the
        model must support ``Gradient``.
    retries : int, optional
        How many times a request is sent again after a transient failure (the server could
        not be reached, did not answer within ``timeout``, or answered HTTP 5xx), with waits
        of 0.1 s, 0.2 s, ... between them; default :data:`DEFAULT_RETRIES` (2). What still
        fails raises :class:`UMBridgeError`, which the step methods count as a rejected
        proposal (stat ``eval_failures``). While the server keeps failing, later requests
        are sent once each until one succeeds (a server that has gone away is not waited
        for at every point).

    Returns
    -------
    UMBridgeOp
        Call it on one float vector per model input; it returns one vector per output (the
        output itself for a model with one).

    Raises
    ------
    UMBridgeError
        The server is unreachable, does not serve ``name``, cannot evaluate it, or
        ``gradient=True`` and the model has no gradient.

    Examples
    --------
    >>> forward = model_op("http://127.0.0.1:4242", "forward")  # doctest: +SKIP
    >>> with pm.Model():                                         # doctest: +SKIP
    ...     theta = pm.Normal("theta", 0, 1, shape=forward.input_sizes[0])
    ...     pm.Normal("y", mu=forward(theta), sigma=0.1, observed=data)
    ...     idata = pm.sample(step=SurrogateHMC())
    """
    refuse_in_a_rerun_script("model_op")  # a worker re-running an unguarded script
    if timeout == "default":
        timeout = DEFAULT_TIMEOUT
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None; got {timeout!r}")
    if gradient not in (True, False, "auto"):
        raise ValueError(f"gradient must be True, False or 'auto'; got {gradient!r}")
    retries = DEFAULT_RETRIES if retries is None else int(retries)
    if retries < 0:
        raise ValueError(f"retries must be a non-negative integer; got {retries!r}")
    config_json = json.dumps(dict(config or {}), sort_keys=True)
    client = Client(url.rstrip("/"), name, timeout, retries)
    info = client.get("Info")
    if info.get("protocolVersion") != 1.0:
        raise UMBridgeError(
            f"The server at {client.url} speaks UM-Bridge protocol version "
            f"{info.get('protocolVersion')!r}; this client speaks 1.0. Update the server or "
            "pymc-surrogate."
        )
    if name not in info.get("models", []):
        raise UMBridgeError(
            f"The UM-Bridge server at {client.url} serves no model {name!r}; it serves "
            f"{info.get('models')}. Pass one of these as name."
        )
    support = client.post("ModelInfo", {"name": name}).get("support", {})
    if not support.get("Evaluate", False):
        raise UMBridgeError(
            f"The UM-Bridge model {name!r} at {client.url} does not support Evaluate, so its "
            "values cannot enter a PyMC model."
        )
    has_gradient = bool(support.get("Gradient", False))
    if gradient is True and not has_gradient:
        raise UMBridgeError(
            f"gradient=True, but the UM-Bridge model {name!r} at {client.url} does not support "
            "Gradient. Use gradient='auto' to sample it as a black box."
        )
    config_dict = json.loads(config_json)
    sizes = {"name": name, "config": config_dict}
    input_sizes = tuple(int(n) for n in client.post("InputSizes", sizes)["inputSizes"])
    output_sizes = tuple(int(n) for n in client.post("OutputSizes", sizes)["outputSizes"])
    return UMBridgeOp(
        client.url, name, config_json, timeout, bool(gradient) and has_gradient,
        input_sizes, output_sizes, retries,
    )


class UMBridgeOp(VJPOp):
    """One UM-Bridge model as a PyTensor Op (build it with :func:`model_op`).

    Inputs and outputs are float64 vectors of the model's sizes. The Op holds the server's
    address, never a connection, so it pickles to PyMC's worker processes (``cores > 1``);
    each process (and thread) opens its own connection on its first evaluation.

    Attributes
    ----------
    url, name : str
    config : dict
    timeout : float or None
    gradient : bool
        Whether the Op differentiates through the server's ``Gradient``.
    input_sizes, output_sizes : tuple of int
    """

    __props__ = ("url", "name", "config_json", "timeout", "gradient", "input_sizes", "output_sizes",
                 "retries")

    def __init__(self, url: str, name: str, config_json: str, timeout: float | None,
                 gradient: bool, input_sizes: tuple[int, ...], output_sizes: tuple[int, ...],
                 retries: int = DEFAULT_RETRIES):
        self.url = url
        self.name = name
        self.config_json = config_json
        self.timeout = timeout
        self.gradient = gradient
        self.input_sizes = input_sizes
        self.output_sizes = output_sizes
        self.retries = retries
        self._client = Client(url, name, timeout, retries)

    @property
    def config(self) -> dict:
        return json.loads(self.config_json)

    def make_node(self, *inputs: Any) -> Apply:
        if len(inputs) != len(self.input_sizes):
            raise TypeError(
                f"The UM-Bridge model {self.name!r} at {self.url} takes {len(self.input_sizes)} "
                f"input vector(s) of sizes {list(self.input_sizes)}; got {len(inputs)}."
            )
        inputs = [_vector(x, n, f"input {i}", self) for i, (x, n) in enumerate(zip(inputs, self.input_sizes))]
        outputs = [pt.TensorType("float64", shape=(n,))() for n in self.output_sizes]
        return Apply(self, inputs, outputs)

    def perform(self, node: Apply, inputs: list, output_storage: list) -> None:
        answer = self._client.post(
            "Evaluate",
            {"name": self.name, "input": [np.asarray(x).tolist() for x in inputs], "config": self.config},
        )
        for storage, values, size in zip(output_storage, answer["output"], self.output_sizes):
            storage[0] = _result(values, size, self)

    def infer_shape(self, fgraph: Any, node: Apply, input_shapes: list) -> list:
        # Shapes are known: computing them never calls the server.
        return [(n,) for n in self.output_sizes]

    def do_constant_folding(self, fgraph: Any, node: Apply) -> bool:
        return False  # evaluate at run time (and fail there), never while compiling

    def vjp(self, inputs: Sequence, outputs: Sequence, cotangents: Sequence) -> list:
        if not self.gradient:
            reason = f"UM-Bridge model {self.name!r} at {self.url} is used as a black box"
            return [grad_not_implemented(self, i, x, reason) for i, x in enumerate(inputs)]
        sens = [pt.zeros(n) if isinstance(g.type, DisconnectedType) else g
                for g, n in zip(cotangents, self.output_sizes)]
        grads = _UMBridgeVJPOp(*self._props())(*inputs, *sens)
        return list(grads) if isinstance(grads, (list, tuple)) else [grads]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_client")  # sessions and sockets stay in the process that opened them
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("retries", DEFAULT_RETRIES)
        self._client = Client(self.url, self.name, self.timeout, self.retries)

    def __str__(self) -> str:
        return f"UMBridgeOp{{{self.name}@{self.url}}}"


class _UMBridgeVJPOp(UMBridgeOp):
    """``(inputs, output cotangents) -> input cotangents`` from the server's ``Gradient``."""

    def make_node(self, *args: Any) -> Apply:
        k = len(self.input_sizes)
        inputs = [_vector(x, n, f"input {i}", self) for i, (x, n) in enumerate(zip(args[:k], self.input_sizes))]
        sens = [_vector(g, n, f"cotangent {j}", self) for j, (g, n) in enumerate(zip(args[k:], self.output_sizes))]
        return Apply(self, inputs + sens, [pt.TensorType("float64", shape=(n,))() for n in self.input_sizes])

    def perform(self, node: Apply, inputs: list, output_storage: list) -> None:
        k = len(self.input_sizes)
        parameters = [np.asarray(x).tolist() for x in inputs[:k]]
        for in_wrt, (storage, size) in enumerate(zip(output_storage, self.input_sizes)):
            total = np.zeros(size)
            for out_wrt, sens in enumerate(inputs[k:]):
                if not np.any(sens):  # an output the logp does not use: no request
                    continue
                answer = self._client.post("Gradient", {
                    "name": self.name, "outWrt": out_wrt, "inWrt": in_wrt, "input": parameters,
                    "sens": np.asarray(sens).tolist(), "config": self.config,
                })
                total += _result(answer["output"], size, self)
            storage[0] = total

    def infer_shape(self, fgraph: Any, node: Apply, input_shapes: list) -> list:
        return [(n,) for n in self.input_sizes]

    def vjp(self, inputs: Sequence, outputs: Sequence, cotangents: Sequence) -> list:
        reason = "second derivatives of UM-Bridge models are not implemented"
        return [grad_not_implemented(self, i, x, reason) for i, x in enumerate(inputs)]

    def __str__(self) -> str:
        return f"UMBridgeVJPOp{{{self.name}@{self.url}}}"


def _vector(x: Any, size: int, what: str, op: UMBridgeOp) -> pt.TensorVariable:
    x = pt.as_tensor_variable(x)
    if x.ndim != 1 or x.type.shape[0] not in (None, size):
        raise TypeError(
            f"The UM-Bridge model {op.name!r} at {op.url}: {what} must be a vector of length "
            f"{size}; got a {x.ndim}-d tensor of shape {x.type.shape}."
        )
    return pt.cast(x, "float64")


def _result(values: Any, size: int, op: UMBridgeOp) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (size,):
        raise UMBridgeError(
            f"The UM-Bridge model {op.name!r} at {op.url} returned a vector of shape "
            f"{array.shape} where it declared ({size},). Fix the model's output sizes."
        )
    return array



"""Reference summaries and data vendored from posteriordb, and their regeneration.

posteriordb (https://github.com/stan-dev/posteriordb, BSD 3-Clause licence, copyright the
Stan Developers) ships reference draws for many posteriors: Stan runs of 10 chains whose
1 000 kept draws each pass its checks (R-hat, ESS, E-BFMI).  We keep only what the benchmark
needs, computed from those draws:

* ``reference/<posterior>.json``: per scalar parameter (posteriordb's names, ``theta[1]``)
  the mean, sd, Monte Carlo standard error of the mean, and the 1/2.5/5/95/97.5/99 %
  quantiles (keys ``q01``, ``q025``, ``q05``, ``q95``, ``q975``, ``q99``); the
  number of chains and draws, and a ``source`` line naming the file, the commit and the
  settings of the Stan run.
* ``data/<data name>.json``: the posterior's data, only the keys the model reads, with its
  source.

Both are regenerated from the git mirror of posteriordb (read with ``git show``, no work tree
needed)::

    python -m benchmarks.posteriordb.reference arma-arma11 --data-keys T,y

Without ``--data-keys`` or ``--all-data`` only the reference summary is written.  The
mirror defaults to ``/work/.mirror/stan-dev+posteriordb/repo`` (override with
``--mirror`` or ``$POSTERIORDB_MIRROR``) and the commit to :data:`PDB_COMMIT`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DATA_DIR",
    "LICENCE",
    "PDB_COMMIT",
    "QUANTILES",
    "REFERENCE_DIR",
    "build_reference",
    "default_mirror",
    "load_data",
    "load_reference",
    "parse_param_name",
    "read_mirror_json",
    "reference_arrays",
    "summarize_draws",
    "trace_location",
    "value_point",
    "variable_shapes",
    "vendor_data",
    "write_reference",
]

_HERE = Path(__file__).resolve().parent
REFERENCE_DIR = _HERE / "reference"
DATA_DIR = _HERE / "data"

#: The posteriordb commit every vendored file was computed from.
PDB_COMMIT = "28f8d3d6e975315f42aa274a8399f21e07a43b30"
#: Licence of posteriordb's data and reference draws (its LICENCE.md).
LICENCE = "BSD-3-Clause (posteriordb LICENCE.md, Copyright (c) 2011-2024 Stan Developers)"
#: Quantile levels kept per parameter (keys ``q01``, ``q025``, ``q05``, ``q95``, ``q975``,
#: ``q99``); the benchmark's tail check uses the 2.5 % and 97.5 % ones.
QUANTILES: tuple[float, ...] = (0.01, 0.025, 0.05, 0.95, 0.975, 0.99)

_DB = "posterior_database"
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[\s*([0-9,\s]+)\s*\])?\s*$")


def _qkey(q: float) -> str:
    """Key of quantile level ``q``: whole percents as ``q01``/``q99``, else per mille
    (``q025``, ``q975``)."""
    percent = q * 100
    if abs(percent - round(percent)) < 1e-9:
        return f"q{round(percent):02d}"
    permille = q * 1000
    if abs(permille - round(permille)) > 1e-9:
        raise ValueError(f"quantile level {q} is not a whole number of per mille")
    return f"q{round(permille):03d}"


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------


def parse_param_name(name: str) -> tuple[str, tuple[int, ...]]:
    """Split a posteriordb (Stan) parameter name into a variable and a 0-based index.

    Parameters
    ----------
    name : str
        ``"sigma"``, ``"theta[1]"`` or ``"z[2,1]"`` (Stan's 1-based indices).

    Returns
    -------
    variable : str
    index : tuple of int
        0-based, ``()`` for a scalar.

    Examples
    --------
    >>> parse_param_name("theta[2,1]")
    ('theta', (1, 0))
    """
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"not a posteriordb parameter name: {name!r}")
    var, idx = match.group(1), match.group(2)
    if idx is None:
        return var, ()
    index = tuple(int(i) - 1 for i in idx.split(","))
    if min(index) < 0:
        raise ValueError(f"Stan indices start at 1: {name!r}")
    return var, index


def trace_location(
    name: str, rename: Mapping[str, str] | None = None
) -> tuple[str, tuple[int, ...]]:
    """Where a posteriordb parameter lives in our trace: variable name and 0-based index.

    Parameters
    ----------
    name : str
        posteriordb parameter name, e.g. ``"theta[1]"``.
    rename : mapping, optional
        posteriordb variable name -> trace variable name, for a module whose PyMC variable is
        named differently (a module's optional ``PARAM_RENAME``).

    Returns
    -------
    variable : str
        Name of the variable in ``idata.posterior``.
    index : tuple of int
        Index into that variable's per-draw value (``()`` for a scalar).
    """
    var, index = parse_param_name(name)
    return (dict(rename or {}).get(var, var), index)


# ---------------------------------------------------------------------------------------
# Loading vendored files
# ---------------------------------------------------------------------------------------


def _read_vendored(directory: Path | str, stem: str) -> Any:
    """The parsed ``<directory>/<stem>.json``: the one place that knows the vendored layout."""
    return json.loads((Path(directory) / f"{stem}.json").read_text())


def _write_vendored(payload: Any, directory: Path | str, stem: str) -> Path:
    """Write ``<directory>/<stem>.json`` as :func:`_read_vendored` reads it; the path."""
    path = Path(directory) / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def load_reference(posterior: str, directory: Path | str = REFERENCE_DIR) -> dict[str, Any]:
    """Read a vendored reference summary.

    Parameters
    ----------
    posterior : str
        posteriordb posterior name, e.g. ``"arma-arma11"``.
    directory : path
        Where the summaries live.

    Returns
    -------
    dict
        The JSON object: ``posterior``, ``source``, ``n_chains``, ``n_draws``,
        ``quantiles`` and ``parameters`` (name -> ``{"mean", "sd", "mcse_mean", "q01",
        "q025", "q05", "q95", "q975", "q99"}``; a reference summarised without draws has
        no quantile keys).
    """
    payload = _read_vendored(directory, posterior)
    if "parameters" not in payload and "params" in payload:  # key of some vendored files
        payload["parameters"] = payload.pop("params")
    return payload


def reference_arrays(
    reference: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    rename: Mapping[str, str] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Reshape a reference summary into arrays shaped like the trace's variables.

    Parameters
    ----------
    reference : mapping
        As returned by :func:`load_reference`.
    shapes : mapping
        Trace variable name -> per-draw shape, e.g. ``{"theta": (4,), "sigma": ()}``.
    rename : mapping, optional
        See :func:`trace_location`.

    Returns
    -------
    dict
        Statistic (``"mean"``, ``"sd"``, ``"mcse_mean"``, ``"q01"``, ...) -> variable ->
        array of the variable's shape.

    Raises
    ------
    ValueError
        If the reference lacks an entry of a variable, has one outside its shape, or names a
        variable not in ``shapes``.
    """
    params = reference["parameters"]
    stats = sorted({k for entry in params.values() for k in entry})
    out = {s: {v: np.full(shape, np.nan) for v, shape in shapes.items()} for s in stats}
    seen = {v: np.zeros(shape, dtype=bool) for v, shape in shapes.items()}
    for name, entry in params.items():
        var, index = trace_location(name, rename)
        if var not in shapes:
            raise ValueError(f"reference parameter {name!r}: no trace variable {var!r}")
        if len(index) != len(shapes[var]) or any(
            i >= n for i, n in zip(index, shapes[var], strict=True)
        ):
            raise ValueError(f"reference parameter {name!r} outside {var} of shape {shapes[var]}")
        seen[var][index] = True
        for s, value in entry.items():
            out[s][var][index] = value
    missing = [v for v, mask in seen.items() if not mask.all()]
    if missing:
        raise ValueError(f"reference has no entries for parts of {missing}")
    return out


def variable_shapes(model: Any, names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Per-draw shapes of a model's variables as they appear in the trace (constrained).

    Parameters
    ----------
    model : pm.Model
    names : sequence of str
        Variable names (``info.param_names``).

    Returns
    -------
    dict of str to tuple of int
    """
    return {n: tuple(int(s) for s in model[n].shape.eval()) for n in names}


def value_point(model: Any, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Map constrained values of the free variables to a point of the model's value variables.

    Parameters
    ----------
    model : pm.Model
    values : mapping
        Free variable name -> constrained value (e.g. a reference mean); every free variable
        must be given.

    Returns
    -------
    dict
        Value variable name (``sigma_log__``, ...) -> value on the sampler's (transformed)
        space, ready for ``model.compile_logp()``.
    """
    import pytensor.tensor as pt

    point: dict[str, np.ndarray] = {}
    for rv in model.free_RVs:
        value = np.asarray(values[rv.name], dtype=float)
        transform = model.rvs_to_transforms.get(rv)
        if transform is not None:
            value = transform.forward(pt.as_tensor(value), *rv.owner.inputs).eval()
        point[model.rvs_to_values[rv].name] = np.asarray(value, dtype=float)
    return point


def load_data(data_name: str, directory: Path | str = DATA_DIR) -> dict[str, Any]:
    """Read a vendored posteriordb data set.

    Parameters
    ----------
    data_name : str
        posteriordb data name, e.g. ``"arma"``.
    directory : path
        Where the data files live.

    Returns
    -------
    dict
        The data (lists and numbers as in posteriordb), without the provenance fields
        (:func:`vendor_data` writes ``{"name", "source", "licence", "data"}``; a bare data
        object is read as it is).
    """
    payload = _read_vendored(directory, data_name)
    if isinstance(payload.get("data"), dict) and "source" in payload:
        return payload["data"]
    return payload  # a bare data file


# ---------------------------------------------------------------------------------------
# Regeneration from the mirror
# ---------------------------------------------------------------------------------------


def default_mirror() -> Path:
    """The posteriordb git directory: ``$POSTERIORDB_MIRROR`` or the machine's mirror."""
    return Path(os.environ.get("POSTERIORDB_MIRROR", "/work/.mirror/stan-dev+posteriordb/repo"))


def _git_show(path: str, mirror: Path | str | None, commit: str) -> bytes:
    mirror = Path(mirror) if mirror is not None else default_mirror()
    return subprocess.run(
        ["git", "-C", str(mirror), "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
    ).stdout


def read_mirror_json(
    path: str, mirror: Path | str | None = None, commit: str = PDB_COMMIT
) -> Any:
    """Read a JSON file (zipped or not) of posteriordb from the git mirror.

    Parameters
    ----------
    path : str
        Path in the repository, e.g.
        ``"posterior_database/reference_posteriors/draws/draws/arma-arma11.json.zip"``.
    mirror : path, optional
        posteriordb git directory (default :func:`default_mirror`).
    commit : str
        Commit to read.

    Returns
    -------
    object
        The parsed JSON (reference draws: one mapping per chain, name -> draws).
    """
    raw = _git_show(path, mirror, commit)
    if path.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            (member,) = archive.namelist()
            raw = archive.read(member)
    return json.loads(raw)


def summarize_draws(
    chains: Sequence[Mapping[str, Sequence[float]]],
    quantiles: Sequence[float] = QUANTILES,
) -> dict[str, dict[str, float]]:
    """Summarise posteriordb's draws: per parameter mean, sd, MCSE of the mean, quantiles.

    Parameters
    ----------
    chains : sequence of mapping
        posteriordb's draws layout: one mapping per chain, parameter name -> draws.
    quantiles : sequence of float
        Quantile levels (pooled over chains, numpy's linear interpolation).

    Returns
    -------
    dict
        Parameter name -> ``{"mean", "sd", "mcse_mean", "q01", ...}``.
    """
    import arviz as az

    names = list(chains[0])
    out: dict[str, dict[str, float]] = {}
    for name in names:
        x = np.asarray([c[name] for c in chains], dtype=float)  # (chain, draw)
        flat = x.ravel()
        entry = {
            "mean": float(flat.mean()),
            "sd": float(flat.std(ddof=1)),
            "mcse_mean": float(np.asarray(az.mcse(x, method="mean")).reshape(-1)[0]),
        }
        for q, value in zip(quantiles, np.quantile(flat, quantiles), strict=True):
            entry[_qkey(q)] = float(value)
        out[name] = entry
    return out


def build_reference(
    posterior: str,
    mirror: Path | str | None = None,
    commit: str = PDB_COMMIT,
) -> dict[str, Any]:
    """Compute a reference summary from posteriordb's reference draws.

    Parameters
    ----------
    posterior : str
        posteriordb posterior name.
    mirror : path, optional
        posteriordb git directory (default :func:`default_mirror`).
    commit : str
        Commit to read.

    Returns
    -------
    dict
        The JSON object :func:`write_reference` writes.

    Raises
    ------
    FileNotFoundError
        If the posterior has no reference posterior in posteriordb.
    """
    definition = read_mirror_json(f"{_DB}/posteriors/{posterior}.json", mirror, commit)
    ref_name = definition.get("reference_posterior_name")
    if not ref_name:
        raise FileNotFoundError(f"posteriordb has no reference posterior for {posterior}")
    draws_path = f"{_DB}/reference_posteriors/draws/draws/{ref_name}.json.zip"
    info_path = f"{_DB}/reference_posteriors/draws/info/{ref_name}.info.json"
    info = read_mirror_json(info_path, mirror, commit)
    chains = read_mirror_json(draws_path, mirror, commit)
    n_draws = sum(len(next(iter(c.values()))) for c in chains)
    inference = info.get("inference", {})
    versions = info.get("versions", {})
    source = (
        f"posteriordb {commit}, {draws_path} ({inference.get('method', '?')}, "
        f"{json.dumps(inference.get('method_arguments', {}), sort_keys=True)}, "
        f"{versions.get('rstan_version', '?')}); summary by benchmarks/posteriordb/reference.py"
    )
    return {
        "posterior": posterior,
        "source": source,
        "licence": LICENCE,
        "n_chains": len(chains),
        "n_draws": n_draws,
        "quantiles": list(QUANTILES),
        "parameters": summarize_draws(chains),
    }


def write_reference(
    posterior: str,
    mirror: Path | str | None = None,
    commit: str = PDB_COMMIT,
    directory: Path | str = REFERENCE_DIR,
) -> Path:
    """Compute and write ``reference/<posterior>.json`` (see :func:`build_reference`).

    Returns
    -------
    Path
        The file written.
    """
    return _write_vendored(build_reference(posterior, mirror, commit), directory, posterior)


def vendor_data(
    posterior: str,
    keys: Sequence[str] | None = None,
    mirror: Path | str | None = None,
    commit: str = PDB_COMMIT,
    directory: Path | str = DATA_DIR,
) -> Path:
    """Write a posterior's data as ``data/<data name>.json``, keeping only ``keys``.

    Parameters
    ----------
    posterior : str
        posteriordb posterior name (its definition names the data set).
    keys : sequence of str, optional
        Data fields the model reads; all of them if None.
    mirror, commit
        As in :func:`build_reference`.
    directory : path
        Where to write.

    Returns
    -------
    Path
        The file written.
    """
    definition = read_mirror_json(f"{_DB}/posteriors/{posterior}.json", mirror, commit)
    data_name = definition["data_name"]
    data_path = f"{_DB}/data/data/{data_name}.json.zip"
    data = read_mirror_json(data_path, mirror, commit)
    if keys is not None:
        missing = sorted(set(keys) - set(data))
        if missing:
            raise KeyError(f"{data_name} has no fields {missing}")
        data = {k: data[k] for k in keys}
    payload = {
        "name": data_name,
        "source": f"posteriordb {commit}, {data_path}",
        "licence": LICENCE,
        "data": data,
    }
    return _write_vendored(payload, directory, data_name)


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate reference summaries (and data) from the mirror."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("posteriors", nargs="+", help="posteriordb posterior names")
    parser.add_argument(
        "--data-keys", help="also vendor the data, keeping these comma-separated fields"
    )
    parser.add_argument("--all-data", action="store_true", help="vendor the data, all fields")
    parser.add_argument("--mirror", type=Path, default=None)
    parser.add_argument("--commit", default=PDB_COMMIT)
    args = parser.parse_args(argv)
    for posterior in args.posteriors:
        print(write_reference(posterior, args.mirror, args.commit))
        if args.data_keys or args.all_data:
            keys = args.data_keys.split(",") if args.data_keys else None
            print(vendor_data(posterior, keys, args.mirror, args.commit))
    return 0


if __name__ == "__main__":
    sys.exit(main())

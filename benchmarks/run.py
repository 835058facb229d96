"""Command line for the side-by-side benchmark; see :func:`benchmarks.harness.run_benchmark`.

Examples
--------
::

    python benchmarks/run.py --models logistic,banana \\
        --samplers SurrogateHMC,NUTS,DEMetropolisZ,Slice \\
        --draws 1000 --tune 1000 --chains 2 --size default --out benchmarks/results/
    python benchmarks/run.py --smoke            # tiny everything, well under a minute
    python benchmarks/run.py --list             # models and samplers available
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# One BLAS thread before numpy loads (the harness also enforces it with threadpoolctl).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

from benchmarks.harness import (  # noqa: E402
    DEFAULT_CACHE_DIR,
    DEFAULT_RESULTS_DIR,
    DEFAULTS,
    SMOKE,
    available_samplers,
    run_benchmark,
    split_names,
)

SMOKE_MODELS = "banana,narrow_gaussian"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (unset numeric options stay None so presets can fill them)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", help="comma-separated model names (default logistic,banana)")
    p.add_argument("--samplers", default="all", help="comma-separated sampler names or 'all'")
    p.add_argument("--draws", type=int)
    p.add_argument("--tune", type=int)
    p.add_argument("--chains", type=int)
    p.add_argument("--size", choices=["smoke", "default", "paper"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR, help="results directory")
    p.add_argument("--tag", help="output file stem (default bench_<size>_<timestamp>)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR, help="reference cache dir")
    p.add_argument("--ref-draws", type=int)
    p.add_argument("--ref-tune", type=int)
    p.add_argument("--ref-chains", type=int)
    p.add_argument(
        "--sampler-kwargs",
        type=json.loads,
        default={},
        help='JSON: per-sampler step kwargs, e.g. \'{"SurrogateHMC": {"n_hidden": 500}}\'',
    )
    p.add_argument("--model-kwargs", type=json.loads, default={}, help="JSON: per-model overrides")
    p.add_argument("--blas-threads", type=int, default=1, help="0 leaves BLAS threads alone")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and chains (fast check)")
    p.add_argument("--list", action="store_true", help="list models and samplers, then exit")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; returns the process exit code."""
    args = parse_args(argv)
    if args.list:
        from benchmarks.models import MODELS

        samplers, registry_error = available_samplers()
        print("models:  ", ", ".join(MODELS))
        print("samplers:", ", ".join(samplers))
        if registry_error:
            print("note:    ", registry_error)
        return 0
    preset = dict(SMOKE if args.smoke else DEFAULTS)
    for key in preset:
        value = getattr(args, key)
        if value is not None:
            preset[key] = value
    models = split_names(args.models or (SMOKE_MODELS if args.smoke else "logistic,banana"))
    frame = run_benchmark(
        models,
        split_names(args.samplers),
        seed=args.seed,
        out_dir=args.out,
        tag=args.tag,
        cache_dir=args.cache,
        sampler_kwargs=args.sampler_kwargs,
        model_kwargs=args.model_kwargs,
        blas_threads=args.blas_threads or None,
        verbose=not args.quiet,
        **preset,
    )
    md = Path(frame.attrs["md"])
    print(md.read_text())
    print(f"written: {frame.attrs['csv']}\n         {md}")
    return 0 if (frame["status"] != "error").all() else 1


if __name__ == "__main__":
    sys.exit(main())

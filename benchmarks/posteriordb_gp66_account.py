"""What limits SurrogateHMC on the 66-d latent GP ``mcycle_gp-accel_gp`` (issue 35).

Four steps, each writing into ``--workdir`` (default ``benchmarks/results/gp66``); ``report``
gathers them into ``benchmarks/results/gp66_account.{md,csv}``.  Run one at a time, with
``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1`` (PyMC 5, Python 3.11)::

    # 1. NUTS reference (dense mass, target_accept 0.99, started at posteriordb's mean):
    #    4 x (1000 + 1000) at seed 1 and 4 x (1000 + 2000) at seed 2
    python benchmarks/posteriordb_gp66_account.py reference --seed 1 --draws 1000
    python benchmarks/posteriordb_gp66_account.py reference --seed 2 --draws 2000
    # 2. learning curve of the surrogate on held-out NUTS draws
    python benchmarks/posteriordb_gp66_account.py curve --variants default --ns 300,1000,2400,5000
    python benchmarks/posteriordb_gp66_account.py curve --variants nocap --ns 300,1000,2400,5000
    python benchmarks/posteriordb_gp66_account.py curve --variants nograd --ns 1000,2400,5000,8000
    python benchmarks/posteriordb_gp66_account.py curve --model gauss66 --variants default --ns 300
    # 2b. how far from Gaussian the potential is in the whitened frame
    python benchmarks/posteriordb_gp66_account.py geometry
    # 3. the default SurrogateHMC, 2 x (1000 + 1000), seed 1, cores=1 (counted evaluations)
    python benchmarks/posteriordb_gp66_account.py sample --seed 1
    # 4. tables
    python benchmarks/posteriordb_gp66_account.py report

The learning curve fits ``RandomNetworkSurrogate`` as ``SurrogateHMC``'s refits do
(``refit.Refits._fit``: the energy window ``TrainingPolicy.energy_window``, the
weights ``TrainingPolicy.weights``, whitening from the training positions, values and
gradients, the step's surrogate defaults) on ``n`` NUTS posterior draws and measures
``e = U - U~`` on 1000 held-out draws.  Variant ``default`` keeps ``max_equations=20_000``
(a point with value and gradient is ``1 + d = 67`` equations, so at most 298 points are
used, a random sub-sample); ``nocap`` sets ``max_equations=10**8``; ``nograd`` fits values
only (one equation a point, so the cap does not bind below 20 000 points), as for a model
without a gradient.

Acceptance columns, for the exact surrogate-transition correction
``min(1, exp(e(x) - e(x')))`` of a move from ``x ~ pi`` to an independent ``x' ~ pi~``
(the move a well-mixing inner chain on the surrogate proposes):

* ``acc_ln = 2 Phi(-sd_e / sqrt 2)``: its value when ``e`` is Gaussian under ``pi``
  (Pitt et al. 2012); ``acc_ln_mad`` the same with the robust sd ``1.4826 MAD``;
* ``acc_is``: the same expectation estimated directly, reweighting held-out draws by
  ``exp(e)`` (noisy once ``sd_e`` is more than a few units: the weights degenerate);
* ``acc_pair``: ``mean min(1, exp(e_i - e_j))`` over pairs of *posterior* draws. It is at
  least 1/2 whatever the surrogate (half the pairs go downhill), so it does not measure how
  far a corrected move can go; kept only because an earlier note quoted it.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
DEFAULT_WORKDIR = RESULTS / "gp66"


def _model():
    from benchmarks.posteriordb import mcycle_gp

    return mcycle_gp.make_model()


def _gauss66():
    """Control: a 66-d Gaussian, condition number ~1e6, and 4000 exact draws of it."""
    import pymc as pm

    rng = np.random.default_rng(66)
    Q, _ = np.linalg.qr(rng.standard_normal((66, 66)))
    sd = np.exp(rng.uniform(np.log(0.03), np.log(30.0), 66))
    cov = (Q * sd**2) @ Q.T
    with pm.Model() as model:
        pm.MvNormal("x", mu=np.zeros(66), cov=cov)
    X = np.random.default_rng(1).standard_normal((4000, 66)) @ np.linalg.cholesky(cov).T
    return model, X


# ---------------------------------------------------------------------------------------
# 1. NUTS reference
# ---------------------------------------------------------------------------------------
def reference(args) -> None:
    import arviz as az
    import pymc as pm

    from benchmarks.posteriordb import mcycle_gp
    from benchmarks.posteriordb.reference import load_reference, reference_arrays, variable_shapes

    model, info = _model()
    initvals = reference_arrays(load_reference(mcycle_gp.POSTERIOR),
                                variable_shapes(model, info.param_names))["mean"]
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws=args.draws, tune=args.tune, chains=4, cores=2,
                          init="jitter+adapt_full", initvals=initvals, target_accept=0.99,
                          random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False,
                          idata_kwargs={"include_transformed": True})
    wall = time.perf_counter() - t0
    out = Path(args.workdir)
    idata.to_netcdf(out / f"nuts_mcycle_s{args.seed}.nc")
    names = [v.name for v in model.value_vars]
    X = np.concatenate([idata.posterior[n].values.reshape(4, args.draws, -1) for n in names], -1)
    np.save(out / f"nuts_mcycle_unc_s{args.seed}.npy", X)
    summ = az.summary(idata, var_names=names, round_to="none")
    ss = idata.sample_stats
    res = dict(seed=args.seed, chains=4, draws=args.draws, tune=args.tune, wall_s=wall,
               divergences=int(ss["diverging"].sum()), n_steps=int(ss["n_steps"].sum()),
               min_ess_bulk=float(summ["ess_bulk"].min()), max_rhat=float(summ["r_hat"].max()),
               argmin_ess=str(summ["ess_bulk"].idxmin()))
    json.dump(res, open(out / f"nuts_mcycle_s{args.seed}.json", "w"), indent=1)
    print(res)


# ---------------------------------------------------------------------------------------
# 2. Learning curve
# ---------------------------------------------------------------------------------------
def _potentials(model, X):
    from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions

    f = ModelFunctions(model, model.value_vars, model.initial_point())
    U, G = np.empty(len(X)), np.empty_like(X)
    for i, q in enumerate(X):
        lp, g = f.logp_and_grad(np.asarray(q, dtype=np.float64))
        U[i], G[i] = -lp, -g
    return U, G


def _fit(P, U, G, variant, seed):
    from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
    from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
    from pymc_surrogate.surrogates.whitening import Whitening

    d = P.shape[1]
    keep = np.flatnonzero(np.isfinite(U) & (U <= U.min() + TrainingPolicy.energy_window(d)))
    P, U, G = P[keep], U[keep], G[keep]
    whitening = Whitening.from_samples(P, dense=P.shape[0] > d)
    kw = dict(n_hidden="auto", activation="softplus", quadratic="auto", alpha="auto",
              max_hidden=500, max_equations=20_000, max_training_error=None)
    if variant == "nocap":
        kw["max_equations"] = 10**8
    s = RandomNetworkSurrogate(**kw, whitening=whitening, random_state=np.random.default_rng(seed))
    s.fit(P, U, None if variant == "nograd" else G,
          sample_weight=TrainingPolicy.weights(U, float(U.min()), d))
    return s, len(keep)


def _errors(s, P, U, G):
    from scipy.stats import norm

    e = U - s.predict(P)
    n = len(e)
    acc = np.minimum(1.0, np.exp(e[:, None] - e[None, :]))  # move i -> j
    acc_pair = float((acc.sum() - n) / (n * (n - 1)))
    v = np.exp(e - e.max())  # pi~/pi up to a constant: x' ~ pi~ by reweighting
    acc_is = float(np.sum(acc * v[None, :]) / (n * v.sum()))
    ess_w = float(v.sum() ** 2 / np.sum(v**2))
    sd = float(np.std(e))
    mad = float(1.4826 * np.median(np.abs(e - np.median(e))))
    gs = np.array([s.value_and_grad(q)[1] for q in P])
    L = s.whitening_
    gw, gsw = L.gradient_to_white(G), L.gradient_to_white(gs)
    grad_rel = float(np.linalg.norm(gw - gsw) / np.linalg.norm(gw - gw.mean(0)))
    return dict(sd_e=sd, mad_e=mad, acc_ln=float(2 * norm.cdf(-sd / np.sqrt(2))),
                acc_ln_mad=float(2 * norm.cdf(-mad / np.sqrt(2))), acc_is=acc_is,
                is_weights_ess=ess_w, acc_pair=acc_pair, sd_U=float(np.std(U)),
                grad_rel=grad_rel)


def curve(args) -> None:
    out = Path(args.workdir)
    if args.model == "gauss66":
        model, X = _gauss66()
    else:
        X = np.concatenate([np.load(out / f"nuts_mcycle_unc_s{s}.npy").reshape(-1, 66)
                            for s in args.reference_seeds])
        model, _ = _model()
    rng = np.random.default_rng(args.seed)
    X = X[rng.permutation(len(X))]
    Xh, Xt = X[: args.n_held], X[args.n_held:]
    Uh, Gh = _potentials(model, Xh)
    Ut, Gt = _potentials(model, Xt[: max(args.ns)])
    print(f"pool {len(Xt)} training draws, {len(Xh)} held out", flush=True)
    path = out / ("curve.json" if args.model == "mcycle" else f"curve_{args.model}.json")
    rows = json.load(open(path)) if path.exists() else []
    for variant in args.variants:
        for n in args.ns:
            if n > len(Xt):
                continue
            if variant == "nocap" and n * 67 * 2800 * 8 > args.max_design_bytes:
                print(f"{variant} n={n}: skipped, design ~{n * 67 * 2800 * 8 / 1e9:.1f} GB", flush=True)
                rows = [r for r in rows if not (r["variant"] == variant and r["n"] == n)]
                rows.append(dict(variant=variant, n=n, skipped=(
                    f"design matrix {n * 67} x ~2800 = {n * 67 * 2800 * 8 / 1e9:.1f} GB, "
                    "several copies in the fit")))
                continue
            t0 = time.perf_counter()
            s, n_rel = _fit(Xt[:n], Ut[:n], Gt[:n], variant, args.seed)
            r = dict(variant=variant, n=n, n_relevant=n_rel, n_used=int(s.n_train_),
                     quadratic=s.polynomial_.quadratic, n_hidden=int(s.hidden_.size),
                     train_err=float(s.training_error_), fit_s=time.perf_counter() - t0)
            r.update(_errors(s, Xh, Uh, Gh))
            m = min(n, 1000)  # the fit's own residual on (up to 1000 of) its training points
            r["train_sd_e"] = float(np.std(Ut[:m] - s.predict(Xt[:m])))
            rows = [x for x in rows if not (x["variant"] == variant and x["n"] == n)] + [r]
            json.dump(rows, open(path, "w"), indent=1)
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)


def geometry(args) -> None:
    """How far from Gaussian the potential is in the whitened frame the surrogate sees.

    For a Gaussian posterior, in coordinates whitened by its covariance, the gradient of U
    equals the position and the Hessian is the identity at every point.
    """
    from pymc_surrogate.surrogates.whitening import Whitening

    out = Path(args.workdir)
    X = np.concatenate([np.load(out / f"nuts_mcycle_unc_s{s}.npy").reshape(-1, 66)
                        for s in args.reference_seeds])
    rng = np.random.default_rng(args.seed)
    X = X[rng.permutation(len(X))[:3000]]
    model, _ = _model()
    U, G = _potentials(model, X)
    W = Whitening.from_samples(X, dense=True)
    x, gw = W.to_white(X), W.gradient_to_white(G)
    A = np.hstack([np.ones((len(x), 1)), x])
    coef, *_ = np.linalg.lstsq(A, gw, rcond=None)
    quad_share = float(1 - (gw - A @ coef).var(0).sum() / gw.var(0).sum())
    # Whitened Hessians by central differences of the gradient at n_hess draws.
    from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions

    f = ModelFunctions(model, model.value_vars, model.initial_point())
    L = W.chol
    eig, names = [], [v.name for v in model.value_vars]
    h = 1e-4
    for q in X[: args.n_hess]:
        H = np.empty((66, 66))
        for k in range(66):
            dq = h * L[:, k]
            gp = -f.logp_and_grad(q + dq)[1]
            gm = -f.logp_and_grad(q - dq)[1]
            H[k] = L.T @ (gp - gm) / (2 * h)
        eig.append(np.linalg.eigvalsh(0.5 * (H + H.T)))
    eig = np.array(eig)
    offsets = np.cumsum([0] + [int(np.prod(model.initial_point()[n].shape)) or 1 for n in names])
    col = dict(zip(names, offsets[:-1]))
    hyper = {n: X[: args.n_hess, col[n]] for n in ("sdgp_1_log__", "lscale_1_log__",
                                                   "sdgp_sigma_1_log__", "lscale_sigma_1_log__")}
    lmax, lmin = np.log(eig[:, -1]), eig[:, 0]
    res = dict(sd_U=float(U.std()), sd_U_gaussian=float(np.sqrt(33)),
               grad_var_whitened=float(gw.var(0).sum()), quad_share=quad_share,
               n_hess=int(args.n_hess),
               eig_max_quantiles=np.quantile(eig[:, -1], [0, .5, 1]).tolist(),
               eig_min_quantiles=np.quantile(lmin, [0, .5, 1]).tolist(),
               draws_with_negative_eig=int(np.sum(lmin < 0)),
               corr_log_eig_max=({k: float(np.corrcoef(v, lmax)[0, 1]) for k, v in hyper.items()}))
    json.dump(res, open(out / "geometry.json", "w"), indent=1)
    print(json.dumps(res, indent=1))


# ---------------------------------------------------------------------------------------
# 3. The default SurrogateHMC
# ---------------------------------------------------------------------------------------
def sample(args) -> None:
    import pymc as pm

    from pymc_surrogate import SurrogateHMC

    model, info = _model()
    info.counter.reset()
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(step=SurrogateHMC(), tune=args.tune, draws=args.draws, chains=args.chains,
                          cores=1, random_seed=args.seed, progressbar=False,
                          discard_tuned_samples=False, compute_convergence_checks=False)
    wall = time.perf_counter() - t0
    n_logp, n_grad = info.counter.snapshot()
    out = Path(args.workdir)
    idata.to_netcdf(out / f"surrogate_hmc_s{args.seed}.nc")
    w, p = idata.warmup_sample_stats, idata.sample_stats
    chains = []
    for c in range(args.chains):
        chains.append(dict(
            training_size_end_of_tune=int(w["training_size"].values[c, -1]),
            fits=int(w["surrogate_fits"].values[c, -1]), failed_fits=int(w["failed_fits"].values[c, -1]),
            tune_model_evals=int(w["total_model_evals"].values[c, -1]),
            draw_model_evals=int(p["total_model_evals"].values[c, -1] - w["total_model_evals"].values[c, -1]),
            draws_accept=float(p["accept"].values[c].mean()),
            draws_accepted=float(p["accepted"].values[c].mean()),
            draws_fallback=float(p["fallback"].values[c].mean()),
            draws_uses_surrogate=float(p["uses_surrogate"].values[c].mean()),
            divergences=int(p["diverging"].values[c].sum())))
    res = dict(seed=args.seed, tune=args.tune, draws=args.draws, n_chains=args.chains, wall_s=wall,
               n_logp=int(n_logp), n_grad=int(n_grad), chains=chains)
    json.dump(res, open(out / f"surrogate_hmc_s{args.seed}.json", "w"), indent=1)
    print(json.dumps(res, indent=1))


# ---------------------------------------------------------------------------------------
# 4. Report
# ---------------------------------------------------------------------------------------
PARAMS = ["Intercept", "sdgp_1", "lscale_1", "zgp_1", "Intercept_sigma", "sdgp_sigma_1",
          "lscale_sigma_1", "zgp_sigma_1"]


def _summary(idata):
    import arviz as az

    return az.summary(idata, var_names=PARAMS, round_to="none")


def _compare(run, ref):
    z_mean = (run["mean"] - ref["mean"]) / np.hypot(run["mcse_mean"], ref["mcse_mean"])
    z_sd = (run["sd"] - ref["sd"]) / np.hypot(run["mcse_sd"], ref["mcse_sd"])
    ratio = run["sd"] / ref["sd"]
    return z_mean, z_sd, ratio


def report(args) -> None:
    import arviz as az

    out = Path(args.workdir)
    lines = ["# mcycle_gp (d = 66): what limits SurrogateHMC", ""]
    rows_csv = []
    # learning curve
    curve_rows = json.load(open(out / "curve.json"))
    lines += ["## Learning curve (held-out NUTS draws, 1000)", "",
              "| variant | n given | n used | quadratic | hidden | sd(U) | sd(e) | train sd(e) | 1.48 MAD(e) "
              "| grad err | acc_ln | acc_ln (MAD) | acc_is (weights' ESS) | acc_pair | fit s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(curve_rows, key=lambda r: (["default", "nocap", "nograd"].index(r["variant"]), r["n"])):
        if "skipped" in r:
            lines.append(f"| {r['variant']} | {r['n']} | skipped: {r['skipped']} |||||||||||")
            rows_csv.append(dict(section="curve", variant=r["variant"], n=r["n"], note=r["skipped"]))
            continue
        lines.append(
            f"| {r['variant']} | {r['n']} | {r['n_used']} | {r['quadratic']} | {r['n_hidden']} "
            f"| {r['sd_U']:.2f} | {r['sd_e']:.2f} | {r.get('train_sd_e', float('nan')):.2f} | {r['mad_e']:.2f} | {r['grad_rel']:.2f} "
            f"| {r['acc_ln']:.1e} | {r['acc_ln_mad']:.1e} | {r['acc_is']:.3f} ({r['is_weights_ess']:.1f}) "
            f"| {r['acc_pair']:.3f} | {r['fit_s']:.0f} |")
        rows_csv.append(dict(section="curve", **{k: r[k] for k in (
            "variant", "n", "n_used", "quadratic", "n_hidden", "sd_U", "sd_e", "train_sd_e", "mad_e", "grad_rel",
            "acc_ln", "acc_ln_mad", "acc_is", "is_weights_ess", "acc_pair", "fit_s")}))
    lines += ["", "acc_ln = 2 Phi(-sd(e)/sqrt 2); acc_pair >= 1/2 by construction (module docstring).",
              "Acceptance 0.5 needs sd(e) ~ 0.95, 0.25 needs ~ 1.63.",
              "train sd(e): on the first min(n, 1000) points given; under the cap most of them "
              "were not among the rows used.", ""]
    gpath = out / "curve_gauss66.json"
    if gpath.exists():
        lines += ["Control, a 66-d Gaussian (condition number ~1e6), exact draws: " + "; ".join(
            f"{r['variant']} n={r['n']} (used {r['n_used']}): sd(e) {r['sd_e']:.1e}, acc_ln {r['acc_ln']:.3f}"
            for r in json.load(open(gpath))), ""]
    gpath = out / "geometry.json"
    if gpath.exists():
        g = json.load(open(gpath))
        lines += ["## Geometry in the whitened frame (NUTS draws)", "",
                  f"- sd(U) over the posterior {g['sd_U']:.2f} (a 66-d Gaussian: {g['sd_U_gaussian']:.2f})",
                  f"- whitened gradient variance {g['grad_var_whitened']:.0f} (Gaussian: 66); share a "
                  f"quadratic potential explains {g['quad_share']:.3f}",
                  f"- whitened Hessian at {g['n_hess']} draws (Gaussian: all eigenvalues 1): largest "
                  "eigenvalue min/median/max " + " / ".join(f"{v:.3g}" for v in g["eig_max_quantiles"])
                  + ", smallest " + " / ".join(f"{v:.3g}" for v in g["eig_min_quantiles"])
                  + f"; {g['draws_with_negative_eig']} draws with a negative eigenvalue",
                  "- correlation of log(largest eigenvalue) with " + ", ".join(
                      f"{k} {v:+.2f}" for k, v in g["corr_log_eig_max"].items()), ""]
        rows_csv.append(dict(section="geometry", sd_U=g["sd_U"], note=json.dumps(g)))
    # NUTS
    nuts = {s: json.load(open(out / f"nuts_mcycle_s{s}.json")) for s in args.reference_seeds}
    lines += ["## NUTS reference", "", "| seed | chains x draws | divergences | n_steps (draws) "
              "| min bulk ESS | max R-hat | gradient evals / min ESS |", "|---|---|---|---|---|---|---|"]
    for s, r in nuts.items():
        lines.append(f"| {s} | {r['chains']} x {r['draws']} | {r['divergences']} | {r['n_steps']} "
                     f"| {r['min_ess_bulk']:.0f} | {r['max_rhat']:.3f} | {r['n_steps'] / r['min_ess_bulk']:.0f} |")
        rows_csv.append(dict(section="nuts", variant=f"seed{s}", n_steps=r["n_steps"],
                             min_ess=r["min_ess_bulk"], max_rhat=r["max_rhat"],
                             evals_per_ess=r["n_steps"] / r["min_ess_bulk"]))
    lines += ["", "NUTS's tuning was not recorded: its counts are the draws' only.", ""]
    # SurrogateHMC
    path = out / f"surrogate_hmc_s{args.seed}.json"
    if path.exists():
        res = json.load(open(path))
        idata = az.from_netcdf(out / f"surrogate_hmc_s{args.seed}.nc")
        summ = _summary(idata)
        ref_seed = max(args.reference_seeds)
        ref = _summary(az.from_netcdf(out / f"nuts_mcycle_s{ref_seed}.nc"))
        zm, zs, ratio = _compare(summ, ref.loc[summ.index])
        min_ess = float(summ["ess_bulk"].min())
        lines += [f"## SurrogateHMC (defaults), {res['n_chains']} x ({res['tune']} + {res['draws']}), "
                  f"seed {res['seed']}, cores=1", "",
                  f"- wall {res['wall_s'] / 60:.1f} min; counted logp {res['n_logp']}, gradient {res['n_grad']}",
                  f"- max R-hat {summ['r_hat'].max():.3f} ({summ['r_hat'].idxmax()}); min bulk ESS "
                  f"{min_ess:.1f} ({summ['ess_bulk'].idxmin()}); min tail ESS {summ['ess_tail'].min():.1f}",
                  f"- against NUTS seed {ref_seed}: max |z| of the means {np.abs(zm).max():.1f} "
                  f"({np.abs(zm).idxmax()}), {int(np.sum(np.abs(zm) > 4))} of {len(zm)} over 4; "
                  f"sd ratios {ratio.min():.2f}-{ratio.max():.2f}; max |z| of the sds {np.abs(zs).max():.1f}",
                  f"- logp evaluations per min ESS {res['n_logp'] / min_ess:.0f} "
                  f"((logp + gradient) / min ESS {(res['n_logp'] + res['n_grad']) / min_ess:.0f}); NUTS: "
                  + ", ".join(f"seed {s} {r['n_steps'] / r['min_ess_bulk']:.0f}" for s, r in nuts.items())
                  + " gradient evaluations per min ESS (draws only)", "",
                  "| chain | training points end of tune | fits (failed) | tune evals | draw evals "
                  "| mean accept | accepted | fallback share | surrogate share | divergences |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c, ch in enumerate(res["chains"]):
            lines.append(f"| {c} | {ch['training_size_end_of_tune']} | {ch['fits']} ({ch['failed_fits']}) "
                         f"| {ch['tune_model_evals']} | {ch['draw_model_evals']} | {ch['draws_accept']:.3f} "
                         f"| {ch['draws_accepted']:.3f} | {ch['draws_fallback']:.2f} "
                         f"| {ch['draws_uses_surrogate']:.2f} | {ch['divergences']} |")
        worst = np.argsort(-np.abs(zm.values))[:5]
        lines += ["", "Largest |z| of the means: " + ", ".join(
            f"{zm.index[i]} {zm.values[i]:+.1f} (sd ratio {ratio.values[i]:.2f})" for i in worst), ""]
        rows_csv.append(dict(section="surrogate_hmc", variant=f"seed{res['seed']}", n_logp=res["n_logp"],
                             n_grad=res["n_grad"], min_ess=min_ess, max_rhat=float(summ["r_hat"].max()),
                             max_abs_z=float(np.abs(zm).max()), sd_ratio_min=float(ratio.min()),
                             sd_ratio_max=float(ratio.max()), evals_per_ess=res["n_logp"] / min_ess,
                             wall_s=res["wall_s"]))
    Path(args.results).mkdir(parents=True, exist_ok=True)
    (Path(args.results) / "gp66_account.md").write_text("\n".join(lines) + "\n")
    keys = sorted({k for r in rows_csv for k in r}, key=lambda k: (k != "section", k != "variant", k))
    with open(Path(args.results) / "gp66_account.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(rows_csv)
    print("\n".join(lines))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default=str(DEFAULT_WORKDIR))
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--reference-seeds", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reference")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--draws", type=int, default=1000)
    r.add_argument("--tune", type=int, default=1000)
    c = sub.add_parser("curve")
    c.add_argument("--variants", type=lambda s: s.split(","), default=["default", "nocap"])
    c.add_argument("--ns", type=lambda s: [int(v) for v in s.split(",")], default=[300, 1000, 2400, 5000])
    c.add_argument("--model", choices=["mcycle", "gauss66"], default="mcycle")
    c.add_argument("--n-held", type=int, default=1000)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--max-design-bytes", type=float, default=4e9,
                   help="skip nocap fits whose design matrix would exceed this")
    g = sub.add_parser("geometry")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--n-hess", type=int, default=40)
    s = sub.add_parser("sample")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--tune", type=int, default=1000)
    s.add_argument("--draws", type=int, default=1000)
    s.add_argument("--chains", type=int, default=2)
    rp = sub.add_parser("report")
    rp.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    {"reference": reference, "curve": curve, "geometry": geometry, "sample": sample,
     "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()

import sys, numpy as np, glob
def box_stats(f, ref):
    r = np.load(ref); b = np.load(f)
    A, m = b["axes"], b["tmean"]
    Ainv = np.linalg.inv(A)
    mu_u = Ainv @ (r["mean"] - m)
    cov_u = Ainv @ r["cov"] @ Ainv.T
    sd_u = np.sqrt(np.diag(cov_u))
    lo, up = b["lower"], b["upper"]
    half = (up - lo) / 2 / sd_u
    off = ((lo + up) / 2 - mu_u) / sd_u
    # nearest face distance from the posterior mean, in posterior sd
    face_lo = (mu_u - lo) / sd_u; face_up = (up - mu_u) / sd_u
    u = (r["draws"] - m) @ Ainv.T
    inside = np.all((u >= lo) & (u <= up), axis=1).mean()
    per_axis_out = 1 - ((u >= lo) & (u <= up)).mean(0)
    sdr = b["draws"].reshape(-1, r["mean"].size)
    # box centre mahalanobis from posterior mean
    bc = b["box_mean"] - r["mean"]
    maha = float(np.sqrt(bc @ np.linalg.solve(r["cov"], bc)))
    return dict(half_sd_min=half.min(), half_sd_med=np.median(half), half_sd_max=half.max(),
                off_max=np.abs(off).max(), nearest_face_sd=min(face_lo.min(), face_up.min()),
                ref_in_box=inside, worst_axis_out=per_axis_out.max(), centre_maha=maha,
                draws_mean_err_sd=np.abs((sdr.mean(0) - r["mean"]) / r["sd"]).max(),
                draws_sd_ratio=(sdr.std(0) / r["sd"]).min(), draws_sd_ratio_max=(sdr.std(0) / r["sd"]).max(),
                chain_in_box=b["in_box"].mean(1).round(2).tolist())
if __name__ == "__main__":
    ref = sys.argv[1]
    for f in sys.argv[2:]:
        s = box_stats(f, ref)
        print(f.split("/")[-1], " ".join(f"{k}={v:.3g}" if not isinstance(v, list) else f"{k}={v}" for k, v in s.items()))

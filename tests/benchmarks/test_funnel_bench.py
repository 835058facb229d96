"""Smoke test of ``benchmarks/funnel.py`` (issue 35's funnel table), so that it cannot rot:
tiny chains, what it writes, not whether the runs are right."""

from __future__ import annotations

import pandas as pd

from benchmarks import funnel


def test_the_funnel_table_is_written(tmp_path):
    funnel.main(["--dim", "2", "--tune", "30", "--draws", "30",
                 "--runs", "NUTS,SurrogateHMC:riemannian", "--models", "gradient",
                 "--out", str(tmp_path), "--tag", "smoke"])
    frame = pd.read_csv(tmp_path / "funnel_smoke.csv")
    assert list(frame["run"]) == ["NUTS", "SurrogateHMC:riemannian"]
    assert set(frame["status"]) <= {"right", "wrong"}  # no run raised
    assert (frame["n_evals"] > 0).all() and "implicit_failures" in frame
    assert "| run | model |" in (tmp_path / "funnel_smoke.md").read_text()

"""Smoke tests of ``benchmarks/shared_store.py`` and ``benchmarks/store_restart.py`` (issue
36's tables), so that they cannot rot: a tiny PDE and short chains, what they write, not
whether the runs meet the issue's targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import shared_store, store_restart

TINY = ["--modes", "3", "--mesh", "6"]


def test_the_shared_store_table_is_written(tmp_path):
    shared_store.main([*TINY, "--tune", "40", "--draws", "30", "--chains", "2", "--cores", "1",
                       "--samplers", "SurrogateHMC", "--ref-draws", "50", "--ref-cores", "1",
                       "--out", str(tmp_path), "--tag", "smoke"])
    frame = pd.read_csv(tmp_path / "shared_store_smoke.csv")
    assert list(frame["chains"]) == ["alone", "shared"]
    assert (frame["solves"] > 0).all() and frame["first_fit"].notna().all()
    assert "| sampler | chains |" in (tmp_path / "shared_store_smoke.md").read_text()


def test_the_restart_report_is_written(tmp_path):
    lines = store_restart.main([*TINY, "--tune", "150", "--draws", "20", "--kill-at", "120",
                                "--second-tunes", "0", "--out", str(tmp_path), "--tag", "smoke"])
    text = (tmp_path / "store_restart_smoke.md").read_text()
    assert "Killed in tuning" in text and "tune=0" in text
    assert len(lines) == 4


@pytest.mark.slow  # 28 s; CI keeps the tables' own smoke tests above
def test_a_variant_of_line_1_runs_in_its_own_process(tmp_path):
    """``--variant`` patches the step classes, so it runs in a process of its own here. The
    second chain fits on the first's evaluations, so tuning ends on a surrogate and the
    variant's tempering level is set and sampled on (a smoke test: what it gives is not
    checked)."""
    from benchmarks.line1_variants import install

    with pytest.raises(ValueError, match="unknown variant"):
        install("no such variant")
    repo = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, str(repo / "benchmarks" / "shared_store.py"), *TINY, "--tune", "200",
         "--draws", "20", "--chains", "2", "--cores", "1", "--sharing", "shared",
         "--samplers", "SurrogateHMC", "--ref-draws", "50", "--ref-cores", "1",
         "--variant", "tail_tempering", "--out", str(tmp_path), "--tag", "variant"],
        check=True, cwd=repo, capture_output=True,
    )
    frame = pd.read_csv(tmp_path / "shared_store_variant.csv")
    assert frame["first_fit"].str.split().str[1].astype(int).iloc[0] < 200

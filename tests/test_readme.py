"""The README's example runs as pasted (shortened: 200 + 200 draws a chain)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pymc as pm

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no python example"
    sample = pm.sample
    monkeypatch.setattr(pm, "sample", lambda **kw: sample(**{**kw, "tune": 200, "draws": 200,
                                                             "progressbar": False}))
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    posterior = namespace["idata"].posterior
    assert posterior.sizes["chain"] == 4 and posterior.sizes["draw"] == 200
    # the example's data: amplitude 2, rate 0.7 (noise 0.05 on 40 points)
    assert abs(float(posterior["amplitude"].mean()) - 2.0) < 0.15
    assert abs(float(posterior["rate"].mean()) - 0.7) < 0.08
    assert np.isfinite(posterior["rate"].values).all()
    assert "amplitude" in capsys.readouterr().out  # az.summary was printed


def test_the_site_shows_the_readme_example():
    # docs/getting_started.md carries the same example (the README's runs above)
    page = (README.parent / "docs" / "getting_started.md").read_text()
    example = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[0]
    assert example in page, "docs/getting_started.md no longer shows the README's example"


def test_the_getting_started_code_runs_in_order(monkeypatch, capsys):
    page = README.parent / "docs" / "getting_started.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) >= 2, "the example and what it reports"
    sample = pm.sample
    monkeypatch.setattr(pm, "sample", lambda **kw: sample(**{**kw, "tune": 200, "draws": 200,
                                                             "progressbar": False}))
    namespace: dict = {"__name__": "getting_started"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    evals_per_ess = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 < evals_per_ess < 100  # a few; every block ran and printed

"""Sphinx configuration of the pymc-surrogate documentation site.

Build locally (what CI runs, warnings as errors)::

    pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os

import pymc_surrogate

project = "pymc-surrogate"
author = "pymc-surrogate developers"
copyright = "2026, pymc-surrogate developers"
release = pymc_surrogate.__version__
version = release

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]

# The markdown notes written for GitHub are pages of the site as they are.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "figures/*.md", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
# Notebooks are committed with their outputs (full runs). CI executes them again in a short
# mode (PYMC_SURROGATE_NOTEBOOK_SHORT=1, read by each notebook's settings cell), so that a
# notebook that no longer runs fails the build.
if os.environ.get("PYMC_SURROGATE_NOTEBOOK_SHORT") == "1":
    nb_execution_mode = "force"
    nb_execution_raise_on_error = True
    nb_execution_timeout = 600
else:
    nb_execution_mode = "off"

autosummary_generate = True
autodoc_typehints = "none"  # numpydoc renders the types written in the docstrings
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()

html_theme = "pymc_sphinx_theme"
html_title = "pymc-surrogate"
html_static_path: list[str] = []
html_theme_options = {
    "navbar_align": "left",
    "secondary_sidebar_items": ["page-toc"],
}
html_context = {
    "github_user": "pymc-surrogate",
    "github_repo": "pymc-surrogate",
    "github_version": "main",
    "doc_path": "docs",
}

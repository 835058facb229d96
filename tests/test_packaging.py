from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_folder_is_a_package_a_wheel_would_ship():
    """A folder of modules without ``__init__.py`` imports from a checkout (namespace
    package) but is left out of a regular install by ``find_packages``."""
    shipped = set(find_packages(where=str(ROOT), include=["pymc_surrogate*"]))
    folders = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "pymc_surrogate").rglob("*.py")
    }
    assert folders <= shipped, folders - shipped

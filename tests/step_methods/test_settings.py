"""One vocabulary across the five step methods: a shared idea has one name, one set of
values and (unless listed below with its reason) one default; old spellings still work for
one release, with a FutureWarning that names the new one."""

from __future__ import annotations

import inspect
import re
import warnings

import pymc as pm
import pytest

from pymc_surrogate import (
    STEP_METHODS,
    HMCKernel,
    KernelHMC,
    SparseGridHMC,
    SurrogateHMC,
    VariationalHMC,
    WarmUp,
)
from pymc_surrogate.step_methods.settings import FINITE_DIFFERENCE
from pymc_surrogate.surrogates import (
    KernelExpFamilyLite,
    NaiveGrid,
    RandomNetworkSurrogate,
    Whitening,
)
from tests.reliability.registry import init_parameters

#: Shared parameters whose defaults differ on purpose, and why.
DIFFERENT_DEFAULTS = {
    # SparseGridHMC's executor evaluates its grid before sampling ("auto": in processes past
    # 10 s of serial evaluation); the others' batch black-box exploration, serial unless given
    "executor": {"SurrogateHMC": None, "AdaptiveSurrogateHMC": None, "VariationalHMC": None,
                 "KernelHMC": None, "SparseGridHMC": "auto"},
    # KernelHMC's "auto" is 1 for the lite form and 0.5 for the finite one
    "adaptation_decay": {"AdaptiveSurrogateHMC": 0.5, "KernelHMC": "auto"},
}

#: The old spellings of "choose for me" (``None``) are gone from every signature; what
#: ``None`` still means is "not given" or "off".
NONE_MEANS_NOT_GIVEN = {"model", "rng", "initial_point", "compile_kwargs", "grid", "domain",
                        "stop_error", "surrogate",
                        "store", "executor", "kernel", "warmup"}


def _signatures() -> dict[str, dict[str, inspect.Parameter]]:
    return {cls.__name__: init_parameters(cls) for cls in STEP_METHODS.values()}


def test_a_shared_setting_has_one_default_unless_its_difference_is_explained():
    signatures = _signatures()
    names = {name for params in signatures.values() for name in params}
    for name in sorted(names):
        defaults = {cls: params[name].default for cls, params in signatures.items()
                    if name in params}
        if len(defaults) < 2:
            continue
        if name in DIFFERENT_DEFAULTS:
            assert defaults == DIFFERENT_DEFAULTS[name], (name, defaults)
        else:
            assert len({repr(d) for d in defaults.values()}) == 1, (name, defaults)


def test_every_step_takes_the_shared_settings_of_the_skeleton():
    signatures = _signatures()
    common = set.intersection(*(set(params) for params in signatures.values()))
    for name in ("use_gradient", "kernel", "warmup", "target_accept", "store",
                 "model", "rng", "initial_point", "compile_kwargs", "blocked"):
        assert name in common, name


#: The kernels' ``n_inner`` without ``kernel=``: "auto" was measured for the random-network
#: steps (logistic regression d = 50: min ESS x2-3 for the same evaluations); the other
#: three keep 1 until it is measured for them.
DEFAULT_INNER = {"SurrogateHMC": "auto", "AdaptiveSurrogateHMC": "auto", "VariationalHMC": 1,
                 "KernelHMC": 1, "SparseGridHMC": 1}


def test_each_default_kernel_is_the_documented_one():
    for name, cls in STEP_METHODS.items():
        assert cls.default_kernel == HMCKernel(n_inner=DEFAULT_INNER[name]), name


@pytest.mark.parametrize("name", sorted(STEP_METHODS))
@pytest.mark.parametrize("flat, spelled", [
    (dict(n_inner=3), "kernel=HMCKernel(n_inner=3)"),
    (dict(path_length=4.0, dense_mass=True), "kernel=HMCKernel(path_length=4.0, dense_mass=True)"),
    (dict(explore_steps=500), "warmup=WarmUp(steps=500)"),
    (dict(explore_tries=8), "warmup=WarmUp(tries=8)"),
])
def test_a_kernel_or_warm_up_setting_given_flat_is_refused_with_the_spelling_that_works(
        name, flat, spelled):
    with _model():
        with pytest.raises(TypeError, match=re.escape(f"pass {name}({spelled})")):
            STEP_METHODS[name](**flat)


@pytest.mark.parametrize("name", sorted(STEP_METHODS))
def test_kernel_and_warm_up_take_their_objects_or_dicts(name):
    with _model():
        step = _make(STEP_METHODS[name], kernel=HMCKernel(path_length=2.0, n_inner=2),
                     warmup={"steps": 123})
        assert (step.kernel.path_length, step.kernel.inner(), step.explore_steps) == (2.0, 2, 123)
        with pytest.raises(TypeError, match="takes a HMCKernel"):
            STEP_METHODS[name](kernel=WarmUp())
        with pytest.raises(TypeError, match="takes a WarmUp"):
            STEP_METHODS[name](warmup=3)


def test_choose_for_me_is_auto_never_none():
    for cls, params in _signatures().items():
        for name, param in params.items():
            if param.default is None:
                assert name in NONE_MEANS_NOT_GIVEN, (cls, name)


def _model():
    model = pm.Model()
    with model:
        pm.Normal("x", 0.0, 1.0, shape=2)
    return model


def _make(cls, **kwargs):
    extra = ({"progressbar": False, "surrogate": NaiveGrid(max_nodes=30)}
             if "progressbar" in init_parameters(cls) else {})
    return cls(**extra, **kwargs)


@pytest.mark.parametrize("cls", list(STEP_METHODS.values()), ids=list(STEP_METHODS))
def test_each_step_reads_the_shared_values_the_same_way(cls):
    with _model():
        for value in ("auto", True, False):
            if value is False and cls.learns_from_gradients:
                with pytest.raises(ValueError, match="use_gradient='finite_difference'"):
                    _make(cls, use_gradient=value)  # no gradient to learn from: says the way out
            else:
                assert _make(cls, use_gradient=value).has_gradient is (value is not False)
        for n_inner in ("auto", 2):
            assert _make(cls, kernel=HMCKernel(n_inner=n_inner)).kernel.n_inner == n_inner
        for bad, match in (({"kernel": {"n_inner": 0}},
                            "n_inner must be a positive integer or 'auto'"),
                           ({"kernel": {"n_inner": True}}, "n_inner must be"),
                           ({"use_gradient": "yes"}, "use_gradient must be 'auto', True, False")):
            with pytest.raises(ValueError, match=match):
                _make(cls, **bad)
        if cls.learns_from_gradients:
            assert _make(cls, use_gradient=FINITE_DIFFERENCE).functions.finite_difference
        else:
            with pytest.raises(ValueError, match="use_gradient must be"):
                _make(cls, use_gradient=FINITE_DIFFERENCE)


@pytest.mark.parametrize("cls", list(STEP_METHODS.values()), ids=list(STEP_METHODS))
def test_use_gradient_none_still_works_and_says_what_replaces_it(cls):
    with _model():
        with pytest.warns(FutureWarning, match="use_gradient='auto'"):
            old = _make(cls, use_gradient=None)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            new = _make(cls)  # the default warns nothing
    assert old.has_gradient and new.has_gradient


def test_variational_gradient_keyword_still_works_and_says_what_replaces_it():
    with _model():
        with pytest.warns(FutureWarning, match="use_gradient='finite_difference'"):
            old = VariationalHMC(gradient="finite_difference")
        with pytest.warns(FutureWarning, match="use_gradient='auto'"):
            VariationalHMC(gradient="model")
        with pytest.raises(ValueError, match="gradient must be one of"):
            VariationalHMC(gradient="adjoint")
    # the old meaning is kept: differences only where PyTensor has no gradient
    assert old.has_gradient and not old.functions.finite_difference


@pytest.mark.parametrize("cls, settings, holder", [
    (SurrogateHMC, {"n_hidden": 50}, "RandomNetworkSurrogate"),
    (SurrogateHMC, {"alpha": None, "quadratic": "full"}, "RandomNetworkSurrogate"),
    (VariationalHMC, {"tau": 10.0}, "ScoreNetworkSurrogate"),
    (KernelHMC, {"n_features": 100}, "KernelExpFamilyFinite"),
    (KernelHMC, {"sigma": 1.0}, "KernelExpFamilyLite"),
])
def test_a_surrogate_setting_given_to_the_step_names_the_estimator(cls, settings, holder):
    """The surrogate's settings live on the estimator (``surrogate=``): the step refuses
    them, with the spelling that works."""
    with _model(), pytest.raises(TypeError, match=rf"surrogate={holder}\("):
        cls(**settings)


def test_the_surrogate_is_an_estimator_of_the_step_family():
    with _model():
        step = SurrogateHMC(surrogate=RandomNetworkSurrogate(n_hidden=7, alpha=0.1))
        fitted = step.fit.new(Whitening.identity(1), 0)
        assert (fitted.n_hidden, fitted.alpha) == (7, 0.1)  # the user's settings, a new copy
        assert fitted is not step.surrogate and fitted.whitening is not None
        with pytest.raises(TypeError, match="takes a RandomNetworkSurrogate"):
            SurrogateHMC(surrogate=KernelExpFamilyLite())
        with pytest.raises(TypeError, match="not a class"):
            KernelHMC(surrogate=KernelExpFamilyLite)
        with pytest.raises(TypeError, match="takes a SmolyakGrid or NaiveGrid"):
            SparseGridHMC(surrogate=RandomNetworkSurrogate())
        with pytest.raises(ValueError, match="n_hidden must be"):
            RandomNetworkSurrogate(n_hidden=-5)  # the estimator checks its own settings


@pytest.mark.parametrize("name", sorted(STEP_METHODS))
@pytest.mark.parametrize("settings, words", [
    (dict(target_accept="0.9"), "target_accept must be a number"),
    (dict(kernel=dict(path_length="2")), "path_length must be a positive number"),
])
def test_a_setting_of_the_wrong_type_is_named(name, settings, words):
    """A string where a number belongs: a clear error naming the setting (it was a bare
    ``TypeError: '<' not supported`` from deep inside)."""
    with pm.Model():
        pm.Normal("x", shape=2)
        with pytest.raises(ValueError, match=words):
            STEP_METHODS[name](**settings)


def test_a_variable_given_twice_is_named():
    """``vars=[x, x]`` failed with ``cannot reshape array of size 0``."""
    with pm.Model():
        x = pm.Normal("x", shape=2)
        pm.Normal("y")
        with pytest.raises(ValueError, match="vars names x more than once"):
            SurrogateHMC(vars=[x, x])

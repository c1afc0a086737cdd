"""zcompile.stats without SciPy: Wilson and Clopper–Pearson bounds against closed forms and against SciPy."""

from __future__ import annotations

import math

import pytest

from zcompile import stats


def test_clopper_pearson_closed_forms():
    """All right (or all wrong): the one-sided bound is alpha ** (1 / n)."""
    for n in (1, 5, 40, 300, 20_000):
        for alpha in (0.05, 0.0056, 0.2):
            assert stats.lower_bound(n, n, alpha) == pytest.approx(alpha ** (1 / n), rel=1e-12)
            assert stats.upper_bound(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-9, abs=1e-15)
    assert stats.lower_bound(0, 10) == 0.0 and stats.upper_bound(10, 10) == 1.0
    assert stats.lower_bound(0, 0) == 0.0 and stats.upper_bound(0, 0) == 1.0


def test_betainc_symmetry_and_a_known_value():
    assert stats.betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - (0.6^4 + 4*0.4*0.6^3)
    for a, b, x in ((0.5, 0.5, 0.3), (7, 200, 0.02), (150, 3, 0.97)):
        assert stats.betainc(a, b, x) + stats.betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-12)


def test_wilson_closed_form():
    lo, hi = stats.wilson(20, 20)
    assert hi == 1.0 and lo == pytest.approx(20 / (20 + 1.959963984540054 ** 2), rel=1e-12)
    assert stats.wilson(0, 0) == (0.0, 1.0) and stats.wilson(0, 7)[0] == 0.0


def test_bounds_equal_scipy():
    st = pytest.importorskip("scipy.stats")
    for n in (1, 2, 10, 40, 150, 1_192, 20_000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            for alpha in (0.05, 0.0056):
                lo = 0.0 if k == 0 else st.beta.ppf(alpha, k, n - k + 1)
                hi = 1.0 if k == n else st.beta.ppf(1 - alpha, k + 1, n - k)
                assert math.isclose(stats.lower_bound(k, n, alpha), lo, abs_tol=1e-12)
                assert math.isclose(stats.upper_bound(k, n, alpha), hi, abs_tol=1e-12)
            ci = st.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            assert stats.wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)

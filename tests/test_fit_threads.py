"""Fits two at a time (`recipes.fit_in_threads`): results in the order of the jobs whatever order they end in,
BLAS at one thread while they run, the first failure raised and the fits not yet started dropped."""

from __future__ import annotations

import threading
import time

import pytest
from threadpoolctl import threadpool_info

from zcompile.errors import ZcError
from zcompile.qroute.dataset import Progress
from zcompile.qroute.recipes import WORKERS, fit_in_threads


def test_results_keep_the_order_of_the_jobs_and_two_run_at_once():
    running, most = [], [0]
    lock = threading.Lock()

    def fit(job):
        with lock:
            running.append(job)
            most[0] = max(most[0], len(running))
        time.sleep(0.05 * (5 - job))  # the first jobs end last
        blas = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        with lock:
            running.remove(job)
        return job * 10, blas

    out = fit_in_threads(fit, range(5), Progress(), "fits")
    assert [r for r, _ in out] == [0, 10, 20, 30, 40]
    import numpy  # noqa: F401  (loads its BLAS)

    assert [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert all(blas == {1} for _, blas in out)  # one BLAS thread per fit
    assert most[0] == min(WORKERS, 5)


def test_the_first_failure_is_raised_and_later_fits_never_start():
    started = []

    def fit(job):
        started.append(job)
        if job == 0:
            raise ZcError("the training decisions hold fewer than two distinct actions: nothing to learn")
        time.sleep(0.2)
        return job

    with pytest.raises(ZcError, match="nothing to learn"):
        fit_in_threads(fit, range(20), Progress(), "fits")
    assert len(started) < 20

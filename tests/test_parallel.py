"""``sim/parallel.py`` in this process: Ray is started only when it helps, the serial path,
results in task order, failures (a task's own error, a dead worker), the tasks this process
runs while a local Ray starts, and the address checks. Ray itself is started by the workers
tests of ``tests/test_dcc_lut.py``, ``tests/test_compiled_harness.py`` and
``tests/test_sweep_run.py``."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from pimphony.sim.parallel import (
    ParallelError,
    TaskFailed,
    _in_order,
    _Queue,
    _StartupHelper,
    check_reachable,
    ordered_map,
    shared_ray,
    unordered_map,
    uses_ray,
)


def _square(x: int) -> int:
    return x * x


def _inverse(x: int) -> float:
    return 1 / x


def test_ray_starts_only_for_several_tasks_and_workers():
    assert uses_ray(2, 2, None) and uses_ray(5, None, None)  # None: every core
    assert uses_ray(2, 1, "ray://head:10001")  # a cluster, whatever the local CPUs
    assert not uses_ray(1, 8, None) and not uses_ray(1, 1, "ray://head:10001")
    assert not uses_ray(9, 1, None) and not uses_ray(0, 4, None)


def test_the_serial_path_runs_here_in_order_without_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # importing Ray would fail
    seen: list[int] = []

    def local(x: int) -> int:
        seen.append(x)
        return -x

    with shared_ray(), ordered_map(_square, [3, 1, 2], 1, local=local) as out:
        assert list(out) == [-3, -1, -2] and seen == [3, 1, 2]  # ``local`` when given
    with unordered_map(_square, [4], workers=8) as out:  # one task: no Ray either
        assert list(out) == [(0, 16)]
    with pytest.raises(ZeroDivisionError), ordered_map(_inverse, [1, 0, 2], 1) as out:
        list(out)  # a task's error propagates


def test_results_come_in_task_order_and_failures_are_raised():
    done = iter([(2, "c"), (0, "a"), (3, "d"), (1, "b")])
    assert list(_in_order(done, 4)) == ["a", "b", "c", "d"]

    class RayTaskError(Exception):  # as Ray wraps a task's error: ``cause``
        cause = KeyError("the task's own")

    failed = iter([(1, "b"), (0, TaskFailed(RayTaskError("remote traceback")))])
    with pytest.raises(KeyError, match="the task's own"):
        list(_in_order(failed, 2))
    from ray.exceptions import WorkerCrashedError

    died = _in_order(iter([(0, "a"), (1, TaskFailed(WorkerCrashedError()))]), 2)
    assert next(died) == "a"
    with pytest.raises(ParallelError, match=r"task 1 of 2: WorkerCrashedError: "):
        next(died)
    raised_here = _in_order(iter([(0, TaskFailed(ValueError("bad shape")))]), 1)
    with pytest.raises(ValueError, match="bad shape"):
        next(raised_here)


def test_this_process_runs_the_first_tasks_until_stopped():
    """While Ray starts, this process takes tasks from the front of the shared queue; once
    stopped it finishes the one it runs and takes no other (the rest are Ray's)."""
    release = threading.Event()

    def slow(x: int) -> int:
        release.wait(5)
        if x == 1:
            raise ValueError("task 1")
        return 10 * x

    todo = _Queue(6)
    helper = _StartupHelper(slow, list(range(6)), todo)
    release.set()
    while helper.finished.qsize() < 2:
        time.sleep(0.01)
    helper.stop()
    helper.thread.join(5)
    rest = []
    while (i := todo.take()) is not None:
        rest.append(i)
    done = dict(helper.finished.get() for _ in range(helper.finished.qsize()))
    assert not helper.busy
    assert sorted([*done, *rest]) == list(range(6)) and not set(done) & set(rest)
    assert list(done)[:2] == [0, 1] and done[0] == 0 and rest == list(range(len(done), 6))
    assert isinstance(done[1], TaskFailed) and done[1].message == "ValueError: task 1"


def test_a_ray_address_nothing_answers_at_is_refused_at_once():
    for bad in ("nonsense", ""):
        with pytest.raises(ParallelError, match=r"expected \[ray://\]HOST:PORT or 'auto'"):
            check_reachable(bad)
    with pytest.raises(ParallelError, match="no Ray cluster answers at 127.0.0.1:1"):
        check_reachable("ray://127.0.0.1:1", timeout_s=1.0)
    refused = pytest.raises(ParallelError, match="no Ray cluster answers")
    with refused, ordered_map(_square, [1, 2], 2, address="127.0.0.1:1") as out:
        list(out)
    refused = pytest.raises(ParallelError, match="expected")  # not a local Ray
    with refused, ordered_map(_square, [1, 2], 2, address="") as out:
        list(out)

"""Tasks run in this process or as Ray tasks: ``sweep-run`` (points as they finish),
``dcc-lut --workers`` and ``verify campaign --workers`` (results in task order).

Ray is started only when it can help (:func:`uses_ray`: more than one task, and more than
one worker or a cluster's ``address``); otherwise the tasks run here one by one. A local Ray
takes several seconds to start, and its workers seconds more to import the task's modules:
meanwhile this process runs the first tasks itself (one at a time, in a thread), until Ray's
first result. A local Ray's workers run at this process's priority. A task whose Ray worker
dies (killed, out of memory) is retried on another (:data:`WORKER_RETRIES`); one that still
fails is reported (:class:`TaskFailed`) or, for the ordered map, raised. Ray's own messages
go to stderr: stdout is the command's.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pimphony.models.errors import PimphonyError

__all__ = [
    "WORKER_RETRIES",
    "ParallelError",
    "TaskFailed",
    "check_reachable",
    "ordered_map",
    "shared_ray",
    "unordered_map",
    "uses_ray",
]

T = TypeVar("T")
R = TypeVar("R")

#: Times Ray reruns a task whose worker died (Ray's own default for tasks is 3).
WORKER_RETRIES = 3
_SHARED: list[bool] = []
"""Open :func:`shared_ray` blocks (Ray then stays up between maps)."""
_POLL_S = 0.05
"""How often the results of Ray and of this process's start-up task are looked at while
both are running."""


class ParallelError(PimphonyError, ValueError):
    """Ray cannot be reached or started, or a task's worker died on every retry."""


@dataclass(frozen=True)
class TaskFailed:
    """A task that raised ``error`` in a worker (Ray's ``RayTaskError`` wrapping it), or
    whose worker died on every retry."""

    error: BaseException

    @property
    def message(self) -> str:
        """``Type: message`` of the error."""
        return f"{type(self.error).__name__}: {self.error}"


def uses_ray(tasks: int, workers: int | None, address: str | None) -> bool:
    """Whether ``tasks`` tasks on ``workers`` local CPUs (``None``: every core) or on the
    cluster at ``address`` start Ray: only with more than one task and more than one worker
    (or a cluster)."""
    return tasks > 1 and (address is not None or workers is None or workers > 1)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a Ray address (``[ray://]HOST:PORT``) nothing answers at within ``timeout_s``,
    instead of letting Ray retry for minutes."""
    import socket

    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ParallelError(f"--address {address!r}: expected [ray://]HOST:PORT or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ParallelError(
            f"--address {address!r}: no Ray cluster answers at {host}:{port} ({exc})"
        ) from None


@contextlib.contextmanager
def shared_ray() -> Iterator[None]:
    """The maps inside share one Ray: started by the first that uses Ray, shut down at the
    end (a command of several stages pays Ray's start-up once)."""
    _SHARED.append(True)
    try:
        yield
    finally:
        _SHARED.pop()
        if not _SHARED and _ray_is_up():
            sys.modules["ray"].shutdown()


def _start_ray(workers: int | None, address: str | None) -> Any:
    """``ray``, initialised: the cluster at ``address`` or a local Ray of ``workers`` CPUs
    (or the one a :func:`shared_ray` block started)."""
    import ray

    if _SHARED and ray.is_initialized():
        return ray
    if address is not None and address != "auto":  # "" too: not a local Ray's address
        check_reachable(address)
    try:
        ray.init(
            address=address,
            num_cpus=None if address is not None else workers,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            # A local Ray's workers run at this process's priority (Ray's default, niceness
            # 15, starves them on a shared machine: a task took twice as long as here).
            _system_config=None if address is not None else {"worker_niceness": 0},
        )
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
        where = f"the Ray cluster at {address!r}" if address else "a local Ray"
        raise ParallelError(f"cannot start {where}: {type(exc).__name__}: {exc}") from None
    return ray


class _Queue:
    """The indices of the tasks not yet taken, shared by Ray's submissions and this
    process's :class:`_StartupHelper`."""

    def __init__(self, n: int) -> None:
        self.todo = deque(range(n))
        self.lock = threading.Lock()

    def take(self) -> int | None:
        """The next task's index, or ``None`` when every task is taken."""
        with self.lock:
            return self.todo.popleft() if self.todo else None


class _StartupHelper:
    """Runs ``fn`` over the tasks it takes from ``todo``, one at a time in a thread of this
    process, until :meth:`stop`; each result (or the exception raised) goes to
    ``finished``."""

    def __init__(self, fn: Callable[[Any], Any], tasks: Sequence[Any], todo: _Queue) -> None:
        self.fn, self.tasks, self.todo = fn, tasks, todo
        self.finished: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._work, name="parallel-startup", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while not self.stopped.is_set() and (i := self.todo.take()) is not None:
            try:
                out: Any = self.fn(self.tasks[i])
            except Exception as exc:  # reported as a Ray worker's failure would be
                out = TaskFailed(exc)
            self.finished.put((i, out))

    def stop(self) -> None:
        """Take no further task (the one running is finished)."""
        self.stopped.set()

    @property
    def busy(self) -> bool:
        """Running a task, or holding results not yet collected."""
        return self.thread.is_alive() or not self.finished.empty()


def _ray_results(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int | None,
    address: str | None,
    overlap: bool,
) -> Iterator[tuple[int, R | TaskFailed]]:
    """``(index, result)`` of every task as it finishes. With ``overlap`` (a local Ray),
    this process runs tasks from the front until Ray's workers give their first result
    (Ray's start-up and its workers' imports take seconds), and Ray is handed tasks a few
    at a time; else every task goes to Ray at once."""
    todo = _Queue(len(tasks))
    helper = None
    if overlap and address is None and not (_SHARED and _ray_is_up()):
        helper = _StartupHelper(fn, tasks, todo)
    in_ray = len(tasks) if helper is None else 2 * (workers or os.cpu_count() or 1)
    ray = None
    try:
        ray = _start_ray(workers, address)
        # A task whose worker dies (killed, out of memory) is retried on another.
        task = ray.remote(num_cpus=1, max_retries=WORKER_RETRIES)
        if inspect.isfunction(fn):  # the task is named after it (``ray::run_point``)
            remote, head = task(fn), ()
        else:  # a partial (or another callable): stored once, not with every task
            remote, head = task(_apply), (ray.put(fn),)
        pending: dict[Any, int] = {}
        while True:
            while len(pending) < in_ray and (i := todo.take()) is not None:
                pending[remote.remote(*head, tasks[i])] = i
            while helper is not None and not helper.finished.empty():
                yield helper.finished.get()
            local = helper is not None and helper.busy
            if not pending:
                if not local:
                    return
                helper.thread.join(_POLL_S)
                continue
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S if local else None)
            for ref in ready:
                if helper is not None:  # Ray's workers are up: they take the rest
                    helper.stop()
                i = pending.pop(ref)
                try:
                    out: Any = ray.get(ref)
                except Exception as exc:  # the task raised, or its worker died every time
                    out = TaskFailed(exc)
                yield i, out
    finally:
        if helper is not None:
            helper.stop()
        if ray is not None and not _SHARED:
            ray.shutdown()


def _apply(fn: Callable[[T], R], task: T) -> R:
    """``fn(task)``: the Ray task of a callable that is not a plain function."""
    return fn(task)


def _ray_is_up() -> bool:
    """Whether this process has a Ray initialised (without importing Ray)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@contextlib.contextmanager
def unordered_map(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int | None = None,
    address: str | None = None,
    local: Callable[[T], R] | None = None,
    overlap: bool = True,
) -> Iterator[Iterator[tuple[int, R | TaskFailed]]]:
    """``(index, result)`` of ``fn`` over ``tasks`` as they finish: as Ray tasks when
    :func:`uses_ray` (``fn`` and the tasks picklable; a task that raised or whose worker
    died gives :class:`TaskFailed`), else computed here in order as they are read, by
    ``local`` if given (e.g. with progress; what it raises propagates). With ``overlap``
    (and a local Ray), this process runs the first tasks in a thread until Ray's first
    result (``fn`` must then be safe in a thread: not one that redirects this process's
    output, as ``sweep-run``'s points do)."""
    if not uses_ray(len(tasks), workers, address):
        here = local or fn
        yield ((i, here(t)) for i, t in enumerate(tasks))
        return
    # Ray's own messages (a worker died, a retry) go to stderr: stdout is the command's.
    with contextlib.redirect_stdout(sys.stderr):
        results = _ray_results(fn, tasks, workers, address, overlap)
        try:
            yield results
        finally:
            results.close()


@contextlib.contextmanager
def ordered_map(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    local: Callable[[T], R] | None = None,
    address: str | None = None,
) -> Iterator[Iterator[R]]:
    """The results of ``fn`` over ``tasks`` in task order (:func:`unordered_map`; a task
    that raised raises its error here, one whose worker died every time
    :class:`ParallelError`)."""
    with unordered_map(fn, tasks, workers, address, local) as done:
        yield _in_order(done, len(tasks))


def _in_order(done: Iterator[tuple[int, Any]], n: int) -> Iterator[Any]:
    """The results of ``done`` (``(index, result)`` of ``n`` tasks in any order) in task
    order; a failed task raises (:func:`ordered_map`)."""
    held: dict[int, Any] = {}
    for want in range(n):
        while want not in held:
            i, out = next(done)
            held[i] = out
        out = held.pop(want)
        if isinstance(out, TaskFailed):
            cause = getattr(out.error, "cause", None)  # Ray's RayTaskError wraps the task's
            if isinstance(cause, BaseException):
                raise cause
            if isinstance(out.error, Exception) and not _is_ray_error(out.error):
                raise out.error
            raise ParallelError(f"task {want} of {n}: {out.message}")
        yield out


def _is_ray_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Ray's own (a worker that died), not one a task raised."""
    return type(exc).__module__.startswith("ray")

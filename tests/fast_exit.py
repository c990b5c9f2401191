"""pytest plugin: end the test process as soon as pytest is done, skipping interpreter teardown.

Why: after its summary, a pytest process that imported torch, Lightning, matplotlib, scipy and
wandb spends seconds of CPU tearing down (freeing every object, then libtorch's C++ static
destructors, e.g. oneDNN's pattern registry: seen in gdb); on a loaded 2-core machine that is
tens of seconds of wall time with nothing left to report. Measured on tests/test_train_cli.py
(load ~5.8), from the end of pytest's summary to the end of the process: 5.4 s wall and
1.9 CPU-s without this plugin, 0.6 s and 0.3 CPU-s with it.

What is skipped is only the teardown of objects and modules: at the very end of pytest
(``pytest_unconfigure``, last) the plugin runs every ``atexit`` handler itself (wandb's teardown,
``multiprocessing``'s joining of children, ``coverage``'s save), flushes stdout and stderr, and
ends the process with pytest's exit status. Set ``CFL_LIGHTNING_SLOW_EXIT=1`` to exit normally.

Enable with ``-p tests.fast_exit`` or ``pytest_plugins = ["tests.fast_exit"]`` in conftest.py.
"""

from __future__ import annotations

import atexit
import os
import sys

import pytest

__all__ = ["pytest_sessionfinish", "pytest_unconfigure"]

_STATUS = "_fast_exit_status"


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001 (pytest's types)
    setattr(session.config, _STATUS, int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:  # noqa: ANN001
    """After every other plugin's unconfigure: atexit handlers, flush, end the process."""
    status = getattr(config, _STATUS, None)
    if status is None or os.environ.get("CFL_LIGHTNING_SLOW_EXIT"):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status)

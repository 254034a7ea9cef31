"""A stop asked for by a signal is remembered, not only raised (knee.runner.interrupt): a
KeyboardInterrupt that lands in a finalizer is printed and dropped by Python, and the run
must still stop at its next check."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from knee.runner import interrupt


@pytest.fixture
def installed() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupt.install()
    try:
        yield
    finally:
        interrupt.install()  # no stop left asked for
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_whose_interrupt_was_dropped_is_raised_again(installed: None, sig: int) -> None:
    interrupt.check()  # nothing asked yet
    try:
        os.kill(os.getpid(), sig)  # its handler runs here, in the main thread, at once
    except KeyboardInterrupt:
        pass  # dropped, as in a __del__
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()  # and at every later check


def test_a_new_run_starts_with_no_stop_asked(installed: None) -> None:
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        pass
    interrupt.install()
    interrupt.check()

"""exit_on_signals (picpac/file/durable.py): SIGTERM and SIGHUP raise Terminated in the main thread, only
where their action is the default one, once, and the previous actions come back."""
from __future__ import annotations

import os
import signal
import threading

import pytest

import picpac
from picpac.file import durable


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_raises_terminated_with_exit_status_128_plus_its_number(signum):
    assert signal.getsignal(signum) == signal.SIG_DFL
    with pytest.raises(picpac.Terminated) as caught:
        with picpac.exit_on_signals():
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
    assert caught.value.signum == signum and caught.value.code == 128 + signum
    assert isinstance(caught.value, SystemExit) and not isinstance(caught.value, Exception)
    assert str(caught.value) == f"terminated by {signal.Signals(signum).name}"
    assert signal.getsignal(signum) == signal.SIG_DFL  # restored


def test_with_blocks_unwind_and_later_signals_do_not_cut_the_cleanup_short():
    cleaned = []
    with pytest.raises(picpac.Terminated):
        with picpac.exit_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second one (docker stop, an impatient user) is ignored
                os.kill(os.getpid(), signal.SIGHUP)
                for _ in range(1000):
                    pass
                cleaned.append(True)
    assert cleaned == [True]


def test_ignored_signals_and_the_program_s_own_handlers_are_left_alone():
    mine = []
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: mine.append(signum))
    try:
        with picpac.exit_on_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        assert mine == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
        signal.signal(signal.SIGTERM, previous_term)


def test_nested_blocks_and_other_threads():
    with picpac.exit_on_signals():
        handler = signal.getsignal(signal.SIGTERM)
        with picpac.exit_on_signals():
            assert signal.getsignal(signal.SIGTERM) is handler  # the inner block changes nothing
        assert signal.getsignal(signal.SIGTERM) is handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    errors = []

    def in_a_thread():
        try:
            with durable.exit_on_signals():
                pass
        except picpac.PicPacError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert errors == ["exit_on_signals() must be entered in the main thread: Python runs signal handlers only there"]

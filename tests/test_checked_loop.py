"""The tests' own event loop (tests/conftest.py CheckedLoop): asyncio's debug checks stay on in
every loop of the run, and only the traceback of each callback's origin is left out."""

import asyncio
import logging
import sys
import threading
import time
import unittest

import pytest

from tests.conftest import CheckedLoop


def call_soon_from_another_thread(loop: asyncio.AbstractEventLoop) -> BaseException | None:
    """What loop.call_soon raises when a thread other than the loop's calls it (None if nothing)."""
    raised: list[BaseException | None] = [None]

    def call() -> None:
        try:
            loop.call_soon(lambda: None)
        except BaseException as error:  # noqa: BLE001 - the test reads whatever it was
            raised[0] = error

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    return raised[0]


class CheckedLoopCaseTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_test_case_runs_on_a_checked_loop(self):
        """A test case's loop is a CheckedLoop with the debug checks on."""
        loop = asyncio.get_running_loop()
        self.assertIsInstance(loop, CheckedLoop)
        self.assertTrue(loop._debug)  # the flag the checks read

    async def test_a_loop_method_from_another_thread_is_an_error(self):
        """call_soon from a thread that is not the loop's raises, as in asyncio's debug mode."""
        error = call_soon_from_another_thread(asyncio.get_running_loop())
        self.assertIsInstance(error, RuntimeError)
        self.assertIn("thread", str(error))

    async def test_a_callback_that_blocks_the_loop_is_logged(self):
        """A callback that holds the loop past slow_callback_duration is logged by asyncio."""
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = 0.01
        with self.assertLogs("asyncio", logging.WARNING) as logs:
            done = loop.create_future()
            loop.call_soon(lambda: (time.sleep(0.05), done.set_result(None)))
            await done
        self.assertTrue(any("took" in line for line in logs.output), logs.output)

    async def test_no_origin_traceback_is_kept(self):
        """Futures and handles keep no traceback of where they were made: that is the cost left out."""
        loop = asyncio.get_running_loop()
        self.assertIsNone(loop.create_future()._source_traceback)
        self.assertIsNone(loop.call_soon(lambda: None)._source_traceback)


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="asyncio.run takes the loop of a policy, deprecated in 3.14")
def test_asyncio_run_uses_a_checked_loop():
    """asyncio.run in a test gets a CheckedLoop too, whose checks catch a call from another thread."""
    async def probe():
        loop = asyncio.get_running_loop()
        return type(loop), call_soon_from_another_thread(loop)

    kind, error = asyncio.run(probe())
    assert kind is CheckedLoop
    assert isinstance(error, RuntimeError)


def test_a_plain_loop_does_not_check():
    """Control: a plain loop without debug mode lets another thread call call_soon, so the
    checks above are the CheckedLoop's and their tests can fail."""
    loop = asyncio.SelectorEventLoop()
    try:
        loop.set_debug(False)
        assert call_soon_from_another_thread(loop) is None
    finally:
        loop.close()

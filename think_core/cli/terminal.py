"""Reading lines for ``think chat`` while Ctrl-C stays in the event loop's hands.

``input()`` blocks a thread that Ctrl-C cannot reach, and ``asyncio.run`` turns a second
Ctrl-C into a ``KeyboardInterrupt`` wherever the program happens to be. Here SIGINT is an
event-loop signal handler: at a prompt it makes ``read_line`` raise :class:`Interrupted`, at
any other time it calls ``on_interrupt`` (which stops the streaming reply). Standard input is
read with ``os.read`` by a daemon thread, which the prompt can abandon (the next prompt takes
over its read) and the interpreter does not wait for at exit.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
from collections.abc import Callable


class Interrupted(Exception):
    """Ctrl-C at a prompt."""


class Terminal:
    """Lines of file descriptor ``fd`` (standard input by default); ``write`` shows prompts."""

    def __init__(self, write: Callable[[str], None], fd: int = 0) -> None:
        self._write = write
        self._fd = fd
        self._buffer = b""
        self._eof = False
        self._pending: asyncio.Future[bytes] | None = None  # the reader thread's current read
        self._waiter: asyncio.Future[None] | None = None  # the prompt waiting for it
        self._loop: asyncio.AbstractEventLoop | None = None
        #: What Ctrl-C does when no prompt is waiting.
        self.on_interrupt: Callable[[], object] | None = None

    def __enter__(self) -> Terminal:
        self._loop = asyncio.get_running_loop()
        self._loop.add_signal_handler(signal.SIGINT, self.interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGINT)

    def interrupt(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(Interrupted())
        elif self.on_interrupt is not None:
            self.on_interrupt()

    async def read_line(self, prompt: str) -> str | None:
        """The next line without its newline; ``None`` at end of input (Ctrl-D). Raises
        :class:`Interrupted` on Ctrl-C."""
        self._write(prompt)
        while b"\n" not in self._buffer and not self._eof:
            pending = self._pending or self._start_read()
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            pending.add_done_callback(functools.partial(_wake, waiter))
            try:
                await waiter
            finally:
                self._waiter = None
            self._pending = None
            data = pending.result()
            self._eof = not data
            self._buffer += data
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").removesuffix("\r")

    def _start_read(self) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()

        def read() -> None:
            try:
                data = os.read(self._fd, 65536)
            except OSError:  # e.g. the terminal went away: the same as end of input
                data = b""
            try:
                loop.call_soon_threadsafe(_deliver, future, data)
            except RuntimeError:  # the loop closed while this thread waited: nobody wants the line
                pass

        threading.Thread(target=read, name="think-chat-stdin", daemon=True).start()
        self._pending = future
        return future


def _wake(waiter: asyncio.Future[None], _: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _deliver(future: asyncio.Future[bytes], data: bytes) -> None:
    if not future.done():
        future.set_result(data)

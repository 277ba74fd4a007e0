"""One live connection to an MCP server, owned by a task of its own.

The ``mcp`` SDK's client is a stack of anyio task groups and context managers that must be
entered and left by one task, and a failing transport cancels the task that entered them. So a
connection lives in a background task: it enters the client, lists the tools, then runs the
calls it is handed through a queue, each in a child task, answering through futures. Callers
never run SDK code in their own task, so a dying server fails their call but never cancels
their turn, and every wait of a caller has a deadline.

This module imports the SDK; import it only when a server is opened (the extra may be missing).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from .errors import MCPServerError, MCPSessionLost, MCPToolError

logger = logging.getLogger("think.mcp")

_MAX_TOOL_PAGES = 100  # a server whose tools/list never ends must not hang opening it
_HTTP_READ_TIMEOUT = 300.0  # the SDK's default: a server may hold a response stream open

ClientFactory = Callable[[], AbstractAsyncContextManager[Any]]


def stdio_client_factory(command: str, args: list[str], env: dict[str, str] | None, cwd: str | None) -> ClientFactory:
    """A client that starts ``command`` and speaks MCP over its stdin/stdout. The SDK merges
    ``env`` over a small safe environment (``PATH``, ``HOME``, ...), not over ``os.environ``."""
    params = StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)
    return lambda: Client(stdio_client(params, errlog=_server_stderr()))


def http_client_factory(url: str, headers: dict[str, str] | None) -> ClientFactory:
    """A client of a streamable-HTTP MCP endpoint; ``headers`` go with every request."""
    return lambda: Client(_http_transport(url, headers))


@asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str] | None) -> AsyncIterator[Any]:
    import httpx2  # the SDK's HTTP client: configuring one is its documented way to send headers

    timeout = httpx2.Timeout(30.0, read=_HTTP_READ_TIMEOUT)
    async with httpx2.AsyncClient(headers=headers or {}, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def _server_stderr() -> Any:
    """The server's stderr goes to ours when ours is a real file (the server's diagnostics stay
    visible), else nowhere: a replaced ``sys.stderr`` without a descriptor cannot take a pipe."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL
    return sys.stderr


@dataclass(eq=False)  # identity: pending calls are kept in a set
class _Call:
    name: str
    arguments: dict[str, Any]
    future: asyncio.Future[Any]
    meta: dict[str, Any] | None = field(default=None)
    scope: anyio.CancelScope | None = field(default=None)

    def abandon_if_cancelled(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled() and self.scope is not None:
            self.scope.cancel()


class Connection:
    """A client session in its owner task. ``start`` returns the listed tools; ``call`` returns
    the SDK's ``CallToolResult`` or raises :class:`MCPToolError` (the server's protocol error) or
    :class:`MCPServerError` (no answer: stopped, unreachable, too slow)."""

    def __init__(self, open_client: ClientFactory, label: str, *, remote: bool) -> None:
        self._open_client = open_client
        self._label = label
        self._not_started = "could not be reached" if remote else "failed to start"
        self._queue: asyncio.Queue[_Call | None] = asyncio.Queue()
        self._pending: set[_Call] = set()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[list[Any]] | None = None
        self._failure: str | None = None
        self.loop = asyncio.get_running_loop()

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and self._failure is None

    @property
    def failure(self) -> str | None:
        """Why the connection ended, when it ended on its own."""
        return self._failure

    async def start(self, timeout: float) -> list[Any]:
        self._ready = self.loop.create_future()
        # A fresh context: the connection outlives the turn that happened to open it.
        self._task = asyncio.create_task(self._own(), name=f"mcp:{self._label}", context=contextvars.Context())
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.close(timeout=5.0)
            raise MCPServerError(f"MCP server {self._label!r} {self._not_started} within {timeout:g} s") from None
        except BaseException:
            await self.close(timeout=5.0)
            raise

    async def call(self, name: str, arguments: dict[str, Any], timeout: float, meta: dict[str, Any] | None = None) -> Any:
        if not self.alive:
            raise MCPServerError(f"MCP server {self._label!r} is not running: {self._failure or 'closed'}")
        job = _Call(name, arguments, self.loop.create_future(), meta=meta)
        job.future.add_done_callback(job.abandon_if_cancelled)
        self._pending.add(job)
        self._queue.put_nowait(job)
        try:
            return await asyncio.wait_for(job.future, timeout)
        except TimeoutError:
            raise MCPServerError(
                f"MCP server {self._label!r} did not answer the call of {name!r} within {timeout:g} s"
            ) from None
        finally:
            self._pending.discard(job)

    async def close(self, timeout: float) -> None:
        """Leave the client (a stdio server is asked to exit, then killed); cancel the owner task
        if it does not finish within ``timeout``."""
        task = self._task
        if task is None or task.done():
            return
        self._queue.put_nowait(None)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            logger.warning("MCP server %r did not close within %g s; cancelling its connection", self._label, timeout)
            task.cancel()
            await asyncio.wait({task}, timeout=timeout)

    # -- the owner task ---------------------------------------------------------------------------
    async def _own(self) -> None:
        try:
            async with self._open_client() as client:
                tools = await _list_tools(client)
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(tools)
                async with anyio.create_task_group() as calls:
                    while (job := await self._queue.get()) is not None:
                        calls.start_soon(self._run, client, job)
                    calls.cancel_scope.cancel()
        except (Exception, BaseExceptionGroup) as exc:  # the transport's task group raises groups
            self._failure = _describe(exc)
            logger.warning("MCP server %r connection ended: %s", self._label, self._failure)
        finally:
            self._failure = self._failure or "the connection was closed"
            self._settle_all()

    async def _run(self, client: Any, job: _Call) -> None:
        if job.future.done():
            return  # the caller gave up before the call started
        with anyio.CancelScope() as scope:
            job.scope = scope
            try:
                result = await client.call_tool(job.name, job.arguments, meta=job.meta)
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED or _session_lost(exc):
                    self._failure = _describe(exc)
                    self._queue.put_nowait(None)  # leave the client: the next call restarts the server
                    lost = MCPSessionLost if _session_lost(exc) else MCPServerError
                    _settle(job.future, lost(self._lost(job.name)))
                else:
                    _settle(job.future, MCPToolError(f"{exc.message} (MCP error {exc.code})"))
                return
            except Exception as exc:
                failed = f"MCP server {self._label!r}: the call of {job.name!r} failed: {_describe(exc)}"
                _settle(job.future, MCPServerError(failed))
                return
            _settle(job.future, result)

    def _settle_all(self) -> None:
        """Fail what is still waiting: the connection is gone."""
        if self._ready is not None and not self._ready.done():
            failed = MCPServerError(f"MCP server {self._label!r} {self._not_started}: {self._failure}")
            self._ready.set_exception(failed)
            self._ready.exception()  # retrieved: start() raises it, or nobody waits any more
        for job in list(self._pending):
            _settle(job.future, MCPServerError(self._lost(job.name)))
        while not self._queue.empty():
            queued = self._queue.get_nowait()
            if queued is not None:
                _settle(queued.future, MCPServerError(self._lost(queued.name)))

    def _lost(self, name: str) -> str:
        return f"MCP server {self._label!r} stopped during the call of {name!r}: {self._failure}"


async def _list_tools(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _settle(future: asyncio.Future[Any], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _session_lost(exc: MCPError) -> bool:
    """Whether an HTTP server refused the call because it does not know the session: it
    restarted and forgot it. Servers say so in words ("Session not found"; the SDK's own
    stand-in for a bare 404 is "Session terminated"), with varying codes."""
    message = exc.message.lower()
    return "session" in message and ("not found" in message or "terminated" in message or "expired" in message)


def _describe(exc: BaseException) -> str:
    """The innermost first cause of a (nested) exception group, readable."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "the server closed the connection (a server process writes why to its stderr)"
    if isinstance(exc, MCPError) and _session_lost(exc):
        return f"the server no longer knows the connection's session ({exc.message})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

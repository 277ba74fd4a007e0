"""Serve an agent over WebSocket and HTTP, with the built-in chat page at /.

Examples:
  think serve --model openai:gpt-4o-mini --db chats.db
  think serve --model demo --port 8000        (offline: the demo's scripted model and tools)

  think serve --model demo --host 0.0.0.0 --token "$TOKEN" --allowed-host chat.example.com \
      --allow-origin https://chat.example.com        (behind a TLS reverse proxy)

Routes: / (chat page), /agents/think/<session> (WebSocket, cf_agent_* protocol),
POST /api/chat (AI SDK UI message stream), /api/sessions/<id>/messages, /healthz.
Set THINK_API_TOKEN (or --token) to require a bearer token. Browser pages of other origins
are refused unless listed with --allow-origin; on a loopback --host only localhost names are
accepted as Host (add more with --allowed-host). Tokens are masked in the access log.
Without -v the log has one WARNING line per failed turn (session, request id, classification,
the provider's message); -v adds think's INFO records and every hook call of every turn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigurationError
from ..hooks.markers import DISTRIBUTION
from .common import add_agent_arguments, add_plugin_arguments, agent_from_args

__all__ = ["add_arguments", "add_plugin_arguments", "agent_from_args", "byte_size", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_agent_arguments(parser)
    add_plugin_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 = any free port)")
    parser.add_argument("--token", default=None, help="bearer token required by the API (default: $THINK_API_TOKEN)")
    parser.add_argument(
        "--max-body", "--max-body-bytes", dest="max_body_bytes", type=byte_size, default=None, metavar="SIZE",
        help="largest request body / WebSocket frame, e.g. 8MiB or 1000000 (default: 32MiB; a user's files have limits of their own)",
    )
    parser.add_argument(
        "--max-file", dest="max_file_bytes", type=byte_size, default=None, metavar="SIZE",
        help="largest file a user may send in a message (default: 10MiB; larger ones get 413)",
    )
    parser.add_argument(
        "--max-message-files", dest="max_message_bytes", type=byte_size, default=None, metavar="SIZE",
        help="largest size of one message's files together (default: 20MiB)",
    )
    parser.add_argument(
        "--allow-origin", action="append", default=None, metavar="URL",
        help="a browser origin (scheme://host[:port]) allowed besides the server's own; repeatable; '*' allows any",
    )
    parser.add_argument(
        "--allowed-host", action="append", default=None, metavar="NAME",
        help="a Host name accepted besides localhost, 127.0.0.1 and [::1] (*.example.com for subdomains); repeatable",
    )
    parser.add_argument("--no-timeline", action="store_true", help="do not send hook timeline frames to WebSocket clients")
    parser.add_argument(
        "--header-timeout", type=float, default=None, metavar="SECONDS",
        help="close a connection whose request headers take longer than this to arrive (default 10)",
    )
    parser.add_argument(
        "--http", choices=("auto", "httptools", "h11"), default="auto",
        help="HTTP/1.1 implementation: httptools when installed (the fast extra), else h11 (default: auto)",
    )
    parser.add_argument(
        "--ws-compression", choices=("large", "all", "off"), default="large",
        help="WebSocket compression: large messages only, no state kept between messages (default); "
        "all (every message, ~44 KiB of zlib state per open connection); off",
    )
    parser.add_argument(
        "--cancel-on-disconnect", action="store_true",
        help="stop an HTTP chat's turn when its client closes the response (default: it runs on, and a reload resumes it)",
    )


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def byte_size(text: str) -> int:
    """``"8MiB"``, ``"512k"`` or ``"1048576"`` as a number of bytes (at least 1)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8MiB, 512KiB, 1000000)")
    return int(match.group(1)) * _UNITS[unit]


async def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server import DEFAULT_MAX_BODY_BYTES, create_app, ws_frame_limit
        from ..server.header_timeout import HEADER_TIMEOUT, with_header_timeout
        from ..server.logs import uvicorn_log_config
        from ..server.ws_protocol import uvicorn_ws_options
    except ImportError as exc:
        print(f"think serve: the server extra is not installed ({exc.name}); pip install '{DISTRIBUTION}[server]'", file=sys.stderr)
        return 2
    if not getattr(args, "verbose", 0):
        _operator_log()
    else:  # -v: every hook call of every turn as well (the timeline the page shows, on stderr)
        os.environ.setdefault("THINK_TRACE_PLUGINS", "1")
    try:
        agent = agent_from_args(args)
    except ConfigurationError as exc:
        print(f"think: {exc}", file=sys.stderr)
        return 2
    max_body = args.max_body_bytes or DEFAULT_MAX_BODY_BYTES
    try:
        try:
            app = create_app(
                agent,
                api_token=args.token,
                max_body_bytes=max_body,
                timeline=not args.no_timeline,
                allowed_origins=args.allow_origin or (),
                allowed_hosts=args.allowed_host,
                bind_host=args.host,
                cancel_on_disconnect=args.cancel_on_disconnect,
            )
        except ValueError as exc:  # e.g. an --allow-origin that is not an origin
            print(f"think serve: {exc}", file=sys.stderr)
            return 2
        try:
            protocol = with_header_timeout(args.header_timeout or HEADER_TIMEOUT, args.http)
        except ImportError:
            print(f"think serve: --http httptools needs httptools; pip install '{DISTRIBUTION}[fast]'", file=sys.stderr)
            return 2
        config = uvicorn.Config(
            app, host=args.host, port=args.port, lifespan="on", log_level="info",
            log_config=uvicorn_log_config(), timeout_graceful_shutdown=5, **uvicorn_ws_options(args.ws_compression),
            ws_max_size=ws_frame_limit(max_body),
            http=protocol,
        )
        # Bind first, so the announced URL has the real port (also for --port 0); announce it once
        # start-up (recovery included) is over and the socket accepts connections.
        sock = config.bind_socket()
        host, port = sock.getsockname()[:2]
        server = _server_class(uvicorn)(config)
        server.announce = f"think: serving on http://{host}:{port}  (chat page at /)"
        await server.serve(sockets=[sock])
    finally:
        await agent.aclose()
    return 0



def _operator_log() -> None:
    """Without ``-v``, ``think serve`` still shows what an operator must see: every warning (one
    per failed turn among them, from ``think.recovery``) and submissions taken over from a dead
    server or waiting for the store (``think.submissions``, INFO and up)."""
    from ..server.logs import RedactSecrets

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("think: %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    think = logging.getLogger("think")
    think.addHandler(handler)
    think.setLevel(logging.WARNING)
    think.propagate = False  # not twice when something else shows think's records too
    logging.getLogger("think.submissions").setLevel(logging.INFO)


def _server_class(uvicorn: Any) -> type:
    """uvicorn's server, handling Ctrl-C / SIGTERM as a plain graceful stop.

    uvicorn re-raises the signal it caught once it has shut down, which turns Ctrl-C into a
    ``KeyboardInterrupt`` traceback from ``asyncio.run`` and cuts short closing the agent.
    """

    class Server(uvicorn.Server):
        announce = ""  # printed once the server accepts connections

        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and self.announce:
                print(self.announce, flush=True)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            handled = []
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self.handle_exit, sig, None)
                    handled.append(sig)
                except (NotImplementedError, RuntimeError):  # e.g. Windows: keep the default
                    pass
            try:
                yield
            finally:
                for sig in handled:
                    loop.remove_signal_handler(sig)

    return Server

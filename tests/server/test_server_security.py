"""The server's browser-facing defences, against a real uvicorn server with httpx and
``websockets`` clients: ``Origin`` and ``Host`` checks on every route and the WebSocket (403,
a JSON error, the socket refused before accept), ``application/json`` only for ``/api/chat``
(415), the security headers, the WebSocket token as a subprotocol, and credentials kept out of
the log of a real ``think serve``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support import agents
from tests.support.browser import CHROMIUM
from tests.support.browser import LAUNCH_ARGS as PAGE_ARGS
from tests.support.web import ws_url
from think_core.agent import Think
from think_core.cli.serve import byte_size
from think_core.models.scripted import ScriptedModel, Step
from think_core.server import create_app
from think_core.server.logs import redact
from think_core.server.security import AccessPolicy, canonical_origin, is_loopback
from think_core.server.testing import running_server, wait_until_healthy

SECRET = "history-secret-4711"


def memory_agent(*steps: Step) -> Think:
    return agents.make_agent(ScriptedModel(list(steps)), store=":memory:")


@asynccontextmanager
async def served_api(agent: Think, **app_kwargs: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with running_server(create_app(agent, **app_kwargs)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            yield http, base


def chat_body(session_id: str = "c", text: str = "hi") -> dict[str, Any]:
    return {"id": session_id, "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}], "trigger": "submit-message"}


def sse_chunks(raw: str) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]


async def ws_refusal(url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, **kwargs):
            pass
    response = refused.value.response
    return response.status_code, json.loads(response.body or b"{}")


def assert_refused(response: httpx.Response, kind: str) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == kind


ROUTES = [("GET", "/"), ("GET", "/healthz"), ("GET", "/static/chat.js"), ("GET", "/api/sessions/c/messages"), ("POST", "/api/chat")]


# -- Origin ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:1", "https://127.0.0.1", "null", "not an origin"])
async def test_a_foreign_origin_is_refused_on_every_route_and_the_websocket(origin: str) -> None:
    agent = memory_agent()
    await agent.session("s1").add_messages([{"id": "u0", "role": "user", "parts": [{"type": "text", "text": SECRET}]}])
    async with served_api(agent) as (http, base):
        for method, path in ROUTES:
            response = await http.request(method, path, headers={"origin": origin}, json=chat_body())
            assert_refused(response, "forbidden_origin")
            assert SECRET not in response.text
        status, body = await ws_refusal(ws_url(base), origin=origin)
    assert status == 403 and body["error"]["type"] == "forbidden_origin"
    assert len(await agent.session("c").messages()) == 0  # no turn ran


async def test_the_servers_own_origin_and_clients_without_origin_are_served() -> None:
    agent = memory_agent(Step(text="one"), Step(text="two"))
    async with served_api(agent) as (http, base):
        port = base.rsplit(":", 1)[1]
        own = await http.post("/api/chat", json=chat_body("a"), headers={"origin": base})
        bare = await http.post("/api/chat", json=chat_body("b"))
        local = await http.get("/healthz", headers={"host": f"localhost:{port}", "origin": f"http://localhost:{port}"})
        async with connect(ws_url(base), origin=base) as ws:  # type: ignore[arg-type]
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"
    assert own.status_code == bare.status_code == local.status_code == 200
    assert "access-control-allow-origin" not in own.headers  # same-origin needs no CORS


async def test_allowed_origins_are_served_with_cors_and_others_still_refused() -> None:
    agent = memory_agent(Step(text="hello from think"))
    app_origin = "http://app.example:5173"
    async with served_api(agent, allowed_origins=[app_origin + "/"]) as (http, base):
        preflight = await http.options(
            "/api/chat",
            headers={"origin": app_origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type,authorization"},
        )
        post = await http.post("/api/chat", json=chat_body(), headers={"origin": app_origin})
        other = await http.post("/api/chat", json=chat_body(), headers={"origin": "http://evil.example"})
        null = await http.get("/healthz", headers={"origin": "null"})
        async with connect(ws_url(base), origin=app_origin) as ws:  # type: ignore[arg-type]
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == app_origin
    assert "content-type" in preflight.headers["access-control-allow-headers"].lower()
    assert post.status_code == 200 and post.headers["access-control-allow-origin"] == app_origin
    assert "".join(c["delta"] for c in sse_chunks(post.text) if c["type"] == "text-delta") == "hello from think"
    assert_refused(other, "forbidden_origin")
    assert_refused(null, "forbidden_origin")


async def test_a_star_allows_every_origin_but_null_only_when_listed() -> None:
    agent = memory_agent()
    async with served_api(agent, allowed_origins=["*"]) as (http, base):
        anywhere = await http.get("/api/sessions/c/messages", headers={"origin": "https://anything.example"})
        null = await http.get("/api/sessions/c/messages", headers={"origin": "null"})
        async with connect(ws_url(base), origin="https://anything.example") as ws:  # type: ignore[arg-type]
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"
    assert anywhere.status_code == 200 and anywhere.headers["access-control-allow-origin"] == "*"
    assert_refused(null, "forbidden_origin")
    async with served_api(memory_agent(), allowed_origins=["null"]) as (http, _):
        assert (await http.get("/healthz", headers={"origin": "null"})).status_code == 200


def test_allowed_origins_must_be_origins() -> None:
    for bad in ("evil.example", "ftp://x.example", "http://x.example/path", "http://user@x.example"):
        with pytest.raises(ValueError, match="not an origin"):
            create_app(memory_agent(), allowed_origins=[bad])
    assert canonical_origin("HTTP://Example.COM:80/") == "http://example.com"
    assert canonical_origin("https://[::1]:8443") == "https://[::1]:8443"
    assert AccessPolicy.build(["https://a.example:443"], None, None).origins == {"https://a.example"}


# -- Host ------------------------------------------------------------------------------------------


async def test_a_rebinding_host_is_refused_on_loopback_and_loopback_names_pass() -> None:
    agent = memory_agent()
    await agent.session("s1").add_messages([{"id": "u0", "role": "user", "parts": [{"type": "text", "text": SECRET}]}])
    async with served_api(agent) as (http, base):
        port = base.rsplit(":", 1)[1]
        for method, path in ROUTES:
            response = await http.request(method, path, headers={"host": f"evil.example:{port}"}, json=chat_body())
            assert_refused(response, "forbidden_host")
            assert SECRET not in response.text
        # A same-origin request of the rebound page: its Origin matches its Host, the Host check stops it.
        rebound = await http.get(
            "/api/sessions/s1/messages", headers={"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"}
        )
        assert_refused(rebound, "forbidden_host")
        # The socket dialled by name, the name resolving to this server (as rebinding makes it).
        status, body = await ws_refusal(f"ws://evil.example:{port}/agents/think/s1", host="127.0.0.1", port=int(port))
        assert status == 403 and body["error"]["type"] == "forbidden_host"
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost", "LOCALHOST:1"):
            assert (await http.get("/healthz", headers={"host": host})).status_code == 200, host


async def test_allowed_hosts_extend_the_loopback_names() -> None:
    async with served_api(memory_agent(), allowed_hosts=["chat.example.com", "*.think.test"]) as (http, _):
        assert (await http.get("/healthz", headers={"host": "chat.example.com"})).status_code == 200
        assert (await http.get("/healthz", headers={"host": "a.think.test:8443"})).status_code == 200
        assert (await http.get("/healthz", headers={"host": "localhost:9"})).status_code == 200
        assert_refused(await http.get("/healthz", headers={"host": "think.test"}), "forbidden_host")
        assert_refused(await http.get("/healthz", headers={"host": "other.example"}), "forbidden_host")


async def test_off_loopback_any_host_is_served_and_origins_are_still_checked() -> None:
    async with served_api(memory_agent(), bind_host="0.0.0.0") as (http, _):
        assert (await http.get("/healthz", headers={"host": "chat.example.com"})).status_code == 200
        same = await http.get("/healthz", headers={"host": "chat.example.com", "origin": "http://chat.example.com"})
        assert same.status_code == 200
        assert_refused(await http.get("/healthz", headers={"origin": "http://evil.example"}), "forbidden_origin")
    async with served_api(memory_agent(), bind_host="0.0.0.0", allowed_hosts=["*"]) as (http, _):
        assert (await http.get("/healthz", headers={"host": "any.example"})).status_code == 200


async def test_behind_a_tls_proxy_the_forwarded_scheme_and_host_make_the_pages_own_origin() -> None:
    """The README's reverse-proxy set-up: think on loopback, the proxy (on 127.0.0.1, which
    uvicorn trusts) forwarding ``Host`` and ``X-Forwarded-Proto``."""
    proxied = {"host": "chat.example.com", "x-forwarded-proto": "https", "origin": "https://chat.example.com"}
    async with served_api(memory_agent(), allowed_hosts=["chat.example.com"]) as (http, base):
        assert (await http.get("/api/sessions/c/messages", headers=proxied)).status_code == 200
        plain = await http.get("/api/sessions/c/messages", headers={**proxied, "x-forwarded-proto": "http"})
        assert_refused(plain, "forbidden_origin")
        port = int(base.rsplit(":", 1)[1])
        async with connect(
            "ws://chat.example.com/agents/think/s1", host="127.0.0.1", port=port, origin="https://chat.example.com",  # type: ignore[arg-type]
            additional_headers={"x-forwarded-proto": "https"},
        ) as ws:
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.com", ""))


# -- /api/chat bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"])
async def test_chat_needs_a_json_content_type(content_type: str | None) -> None:
    agent = memory_agent(Step(text="never"))
    headers = {"content-type": content_type} if content_type else {}
    async with served_api(agent) as (http, _):
        response = await http.post("/api/chat", content=json.dumps(chat_body()).encode(), headers=headers)
    assert response.status_code == 415 and response.json()["error"]["type"] == "unsupported_media_type"
    assert await agent.session("c").messages() == []


async def test_json_with_a_charset_parameter_is_accepted() -> None:
    async with served_api(memory_agent(Step(text="ok"))) as (http, _):
        response = await http.post("/api/chat", content=json.dumps(chat_body()).encode(), headers={"content-type": "Application/JSON; charset=utf-8"})
    assert response.status_code == 200
    assert [c["delta"] for c in sse_chunks(response.text) if c["type"] == "text-delta"] == ["ok"]


async def test_the_body_limit_is_a_413_before_the_body_is_read_whole() -> None:
    """A chunked body (no content-length) past the limit is answered while the client is still
    sending: the server stops reading at the limit instead of buffering the whole body."""
    agent = memory_agent()
    async with running_server(create_app(agent, max_body_bytes=64 * 1024)) as base:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /api/chat HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        piece = b"x" * 16 * 1024
        for _ in range(8):  # 128 KiB, then silence: the rest of the body never comes
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.close()
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert await agent.session("c").messages() == []


def test_max_body_sizes_on_the_command_line() -> None:
    assert byte_size("8MiB") == 8 * 1024 * 1024 and byte_size("512k") == 512_000 and byte_size("1048576") == 1048576
    for bad in ("0", "-1", "lots", "8XB", ""):
        with pytest.raises(Exception, match="not a size"):
            byte_size(bad)


# -- headers -------------------------------------------------------------------------------------------


async def test_the_page_has_a_strict_csp_and_every_response_the_safety_headers() -> None:
    async with served_api(memory_agent()) as (http, _):
        page = await http.get("/")
        script = await http.get("/static/chat.js")
        style = await http.get("/static/chat.css")
        api_response = await http.get("/api/sessions/c/messages")
        missing = await http.get("/static/index.html")
        refused = await http.get("/healthz", headers={"origin": "http://evil.example"})
    csp = dict(d.strip().split(" ", 1) for d in page.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["frame-ancestors"] == "'none'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert "<script>" not in page.text and "<style>" not in page.text and ' style="' not in page.text
    assert script.headers["content-type"].startswith("text/javascript") and "cf_agent_use_chat_request" in script.text
    assert style.headers["content-type"].startswith("text/css")
    assert missing.status_code == 404
    for response in (page, script, style, api_response, missing, refused):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


# -- the WebSocket token ---------------------------------------------------------------------------------


async def test_the_websocket_token_may_come_as_a_subprotocol() -> None:
    agent = memory_agent()
    async with running_server(create_app(agent, api_token="s3cret")) as base:
        async with connect(ws_url(base), subprotocols=["think", "bearer.s3cret"]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == "think"  # never the credential
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"
        async with connect(ws_url(base), additional_headers={"sec-websocket-protocol": "bearer.s3cret"}) as ws:
            assert ws.subprotocol is None
            assert json.loads(await ws.recv())["type"] == "cf_agent_chat_messages"
            assert json.loads(await ws.recv())["type"] == "cf_agent_stream_resume_none"
            assert json.loads(await ws.recv())["type"] == "cf_agent_identity"
        status, _ = await ws_refusal(ws_url(base), subprotocols=["think", "bearer.wrong"])
        assert status == 403


# -- logs --------------------------------------------------------------------------------------------------


def test_redact_masks_credentials_and_leaves_the_rest() -> None:
    line = '127.0.0.1:5 - "GET /agents/think/s?session=a&token=abc123&API_KEY=k9&x=1 HTTP/1.1" 200'
    assert redact(line) == '127.0.0.1:5 - "GET /agents/think/s?session=a&token=***&API_KEY=***&x=1 HTTP/1.1" 200'
    assert redact("Authorization: Bearer abc.def") == "Authorization: ***"
    assert "abc" not in redact("{'authorization': 'Basic abc='}")
    assert redact("sec-websocket-protocol: think, bearer.abc_123") == "sec-websocket-protocol: think, bearer.***"
    assert redact("/api/chat?tokens=1&keyboard=2") == "/api/chat?tokens=1&keyboard=2"


async def test_think_serve_logs_no_token(tmp_path: Any) -> None:
    token = "tok-S3cret-value"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "serve", "--model", "demo", "--db", str(tmp_path / "c.db"), "--port", "0", "--token", token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        base = line.split()[3]
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
            await wait_until_healthy(http)
            assert (await http.get("/api/sessions/s/messages", headers=auth)).status_code == 200
            assert (await http.get(f"/?token={token}&session=s")).status_code == 200
            assert (await http.get(f"/api/sessions/s/messages?access_token={token}")).status_code == 401
            chat = await http.post("/api/chat", json=chat_body("s", "weather in oslo"), headers=auth)
            assert chat.status_code == 200
        async with connect(ws_url(base, "s", f"?token={token}")) as ws:
            await ws.recv()
        async with connect(ws_url(base, "s"), subprotocols=["think", f"bearer.{token}"]) as ws:  # type: ignore[list-item]
            await ws.recv()
        await ws_refusal(ws_url(base, "s", f"?token={token}x"))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
    log = (out + err).decode()
    assert proc.returncode == 0, log
    assert token not in log
    # The requests were logged, with their credentials masked.
    assert '"GET /?token=***&session=s HTTP/1.1" 200' in log
    assert '"WebSocket /agents/think/s?token=***" [accepted]' in log
    assert '"WebSocket /agents/think/s?token=***" 403' in log
    assert "access_token=***" in log and "POST /api/chat" in log


@pytest.mark.parametrize("flag", [["--allow-origin", "not-an-origin"], ["--max-body", "huge"]])
async def test_think_serve_refuses_bad_security_options(tmp_path: Any, flag: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "serve", "--model", "demo", "--db", str(tmp_path / "c.db"), "--port", "0", *flag,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    assert ("not an origin" in err.decode()) or ("not a size" in err.decode())


# -- a real browser: a page of another origin -----------------------------------------------------------

LAUNCH_ARGS = [*PAGE_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"]
ATTACKER_PAGE = "<!doctype html><title>a page on another origin</title><iframe name=sink></iframe>"

READ_HISTORY = """async (url) => await new Promise((resolve) => {
    const seen = [];
    let opened = false;
    const ws = new WebSocket(url);
    ws.onopen = () => { opened = true; };
    ws.onmessage = (e) => seen.push(String(e.data));
    ws.onclose = (e) => resolve({opened, code: e.code, seen});
    setTimeout(() => resolve({opened, code: null, seen}), 5000);
})"""

FETCH = """async ([url, init]) => {
    try { const r = await fetch(url, init); return {type: r.type, status: r.status, text: r.type === "opaque" ? "" : await r.text()}; }
    catch (e) { return {error: String(e)}; }
}"""

# A text/plain form whose one field spells a JSON chat request: before the checks, the server
# parsed it as JSON and ran the turn.
FORM_POST = """async ([url, name, value]) => await new Promise((resolve) => {
    const form = document.createElement("form");
    Object.assign(form, {method: "POST", action: url, enctype: "text/plain", target: "sink"});
    const field = Object.assign(document.createElement("input"), {type: "hidden", name, value});
    form.append(field);
    document.body.append(form);
    document.querySelector("iframe[name=sink]").addEventListener("load", () => resolve(true), {once: true});
    form.submit();
})"""


def recording(app: Any, seen: list[tuple[str, str, str | None, int]]) -> Any:
    """``app``, noting (scope type, path, Origin, status) of each request it answers."""

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        origin = dict(scope["headers"]).get(b"origin")

        async def watch(message: Any) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                seen.append((scope["type"], scope["path"], origin and origin.decode(), message["status"]))
            elif message["type"] == "websocket.accept":
                seen.append((scope["type"], scope["path"], origin and origin.decode(), 101))
            await send(message)

        await app(scope, receive, watch)

    return wrapper


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)")
async def test_a_page_on_another_origin_cannot_read_history_or_start_a_turn_and_rebinding_is_refused() -> None:
    from playwright.async_api import async_playwright
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    model = ScriptedModel([Step(text="the owner's own turn")])
    agent = Think(model, store=":memory:", load_entrypoints=False)
    await agent.session("victim").add_messages([{"id": "u0", "role": "user", "parts": [{"type": "text", "text": SECRET}]}])
    seen: list[tuple[str, str, str | None, int]] = []

    async def attacker_page(request: Any) -> HTMLResponse:
        return HTMLResponse(ATTACKER_PAGE)

    attacker = Starlette(routes=[Route("/", attacker_page)])
    async with running_server(recording(create_app(agent), seen)) as think, running_server(attacker) as evil, async_playwright() as pw:
        port = think.rsplit(":", 1)[1]
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            page = await browser.new_page()
            console: list[str] = []
            page.on("console", lambda msg: console.append(msg.text))
            await page.goto(evil + "/")
            body = json.dumps(chat_body("victim", "spend the owner's budget"))

            history = await page.evaluate(READ_HISTORY, ws_url(think, "victim"))
            simple = await page.evaluate(FETCH, [f"{think}/api/chat", {"method": "POST", "mode": "no-cors", "headers": {"content-type": "text/plain"}, "body": body}])
            cors = await page.evaluate(FETCH, [f"{think}/api/chat", {"method": "POST", "headers": {"content-type": "application/json"}, "body": body}])
            read = await page.evaluate(FETCH, [f"{think}/api/sessions/victim/messages", {}])
            await page.evaluate(FORM_POST, [f"{think}/api/chat", body[:-1] + ', "pad": "', '"}'])
            await page.set_content(f'<iframe src="{think}/?session=victim"></iframe>')
            await page.wait_for_timeout(500)

            # DNS rebinding: the attacker's name now resolves to this machine.
            rebound = await browser.new_page()
            for path in ("/api/sessions/victim/messages", "/?session=victim"):
                response = await rebound.goto(f"http://evil.example:{port}{path}")
                assert response is not None and response.status == 403
                assert SECRET not in await rebound.content()

            # The same page served by think itself works and shows the history.
            own = await browser.new_page()
            await own.goto(f"{think}/?session=victim")
            await own.wait_for_function("t => document.querySelector('#messages').innerText.includes(t)", arg=SECRET, timeout=10_000)
        finally:
            await browser.close()

    assert history["opened"] is False and history["seen"] == [] and history["code"] == 1006
    assert simple == {"type": "opaque", "status": 0, "text": ""}
    assert "error" in cors and "error" in read
    assert any("frame-ancestors" in line for line in console), console
    # Every request of the foreign page reached the server and was refused there.
    foreign = [entry for entry in seen if entry[2] == evil]
    assert ("websocket", "/agents/think/victim", evil, 403) in foreign
    assert sum(1 for e in foreign if e[:2] == ("http", "/api/chat")) >= 3  # no-cors fetch, preflight, form
    assert {e[3] for e in foreign} == {403}, foreign
    assert ("websocket", "/agents/think/victim", None, 403) not in seen  # the real page's socket was accepted
    assert model.requests == []  # no turn ran: the owner's model budget is untouched
    assert [m.id for m in await agent.session("victim").messages()] == ["u0"]

"""Files a tool returns (``File``, alone or in a list beside text) reach every provider its own
way (issue 29 item 3): Anthropic as image/document blocks inside the ``tool_result``, OpenAI
Chat as the text in the tool message and the files in a user message after the results,
Responses as the function call output's input items, Gemini 3 inside the function response
(earlier Gemini models beside it). The UI stream and the stored tool part carry them as AI SDK
``file`` items, later turns send them again, and the tool cache serves them whole."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply
from tests.recorder import Recorder
from tests.support.agents import make_agent
from tests.support.gemini import chunk, crlf_stream, gemini_model
from tests.support.http_chat import api, post_chat, transport_body
from tests.support.provider_files import ANTHROPIC, GEMINI, PDF, PDF_URL, PNG, PNG_URL, PROVIDERS, Provider
from tests.support.web import user
from think_core import File, hookimpl, substitute, tool
from think_core.models.content import FilePart, TextPart
from think_core.models.scripted import ScriptedModel, Step, call
from think_plugins.caching import ToolCache


@tool(read_only=True)
def report() -> list[Any]:
    """A caption, a chart and the report it comes from."""
    return ["The chart:", File(PNG, "image/png", "chart.png"), File(base64.b64decode(PDF), "application/pdf", "q3.pdf")]


#: How the tool's output is stored and streamed: text and file items in the order returned.
ITEMS = [
    {"type": "text", "text": "The chart:"},
    {"type": "file", "mediaType": "image/png", "url": PNG_URL, "filename": "chart.png"},
    {"type": "file", "mediaType": "application/pdf", "url": PDF_URL, "filename": "q3.pdf"},
]


def _anthropic_result(body: dict[str, Any]) -> Any:
    return body["messages"][-1]


def _openai_result(body: dict[str, Any]) -> Any:
    return body["messages"][-2:]


def _responses_result(body: dict[str, Any]) -> Any:
    return body["input"][-1]


def _gemini_result(body: dict[str, Any]) -> Any:
    return body["contents"][-1]


#: Where each request keeps the call's result, and exactly what it must be.
RESULTS = {
    "anthropic": (_anthropic_result, {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "call_1", "content": [
            {"type": "text", "text": "The chart:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
             "title": "q3.pdf"},
        ]}]}),
    "openai": (_openai_result, [
        {"role": "tool", "tool_call_id": "call_1", "content": "The chart:\n[2 file(s), in the next user message]"},
        {"role": "user", "content": [
            {"type": "text", "text": "The files tool call call_1 (report) returned:"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
            {"type": "file", "file": {"filename": "q3.pdf", "file_data": PDF_URL}},
        ]},
    ]),
    "responses": (_responses_result, {"type": "function_call_output", "call_id": "call_1", "output": [
        {"type": "input_text", "text": "The chart:"},
        {"type": "input_image", "image_url": PNG_URL},
        {"type": "input_file", "filename": "q3.pdf", "file_data": PDF_URL},
    ]}),
    "gemini": (_gemini_result, {"role": "user", "parts": [{"functionResponse": {
        "id": "call_1", "name": "report", "response": {"output": "The chart:"},
        "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}},
                  {"inlineData": {"mimeType": "application/pdf", "data": PDF}}],
    }}]}),
}

GEMINI_3 = dataclasses.replace(GEMINI, model=lambda server: gemini_model(server, "gemini-3-pro-preview"))


@pytest.mark.parametrize("provider", [p if p is not GEMINI else GEMINI_3 for p in PROVIDERS], ids=lambda p: p.name)
async def test_a_tools_image_and_pdf_reach_the_provider_its_own_way_in_the_turn_and_later(
    provider: Provider, loopback: LoopbackServer, tmp_path: Path
) -> None:
    loopback.enqueue(Reply.sse(provider.tool_call("call_1", "report")), Reply.sse(provider.answer("Sales rose.")),
                     Reply.sse(provider.answer("Yes.")))
    agent = make_agent(provider.model(loopback), tools=[report], store=str(tmp_path / "tools.db"))
    session = agent.session("s")
    result = await session.chat("How was Q3?")
    assert result.status == "completed" and result.text == "Sales rose."
    where, expected = RESULTS[provider.name]
    assert where(loopback.requests[1].json) == expected

    # The stored tool part holds the items, so a later turn sends the files again.
    [part] = [p for p in (await session.messages())[1].parts if p.get("toolCallId")]
    assert part["state"] == "output-available" and part["output"] == ITEMS
    await session.chat("Sure?")
    body = loopback.requests[2].json
    if provider.name == "openai":  # the results, then their files, then the new question
        later = body["messages"][-4:-1]
        assert later[:2] == expected and later[2] == {"role": "assistant", "content": "Sales rose."}
    else:
        assert expected in (body.get("messages") or body.get("input") or body["contents"])


async def test_gemini_before_3_gets_the_files_after_the_function_responses(loopback: LoopbackServer) -> None:
    two_calls = chunk({"functionCall": {"id": "fc-1", "name": "report", "args": {}}},
                      {"functionCall": {"id": "fc-2", "name": "report", "args": {}}}, finish="STOP", usage=(9, 3, 0))
    loopback.enqueue(Reply.sse(crlf_stream(two_calls)), Reply.sse(GEMINI.answer("Two charts.")))
    agent = make_agent(gemini_model(loopback, "gemini-2.5-flash"), tools=[report], store=":memory:")
    assert (await agent.session("s").chat("Twice?")).text == "Two charts."
    response = {"name": "report", "response": {"output": "The chart:"}}
    files = [{"inlineData": {"mimeType": "image/png", "data": PNG}},
             {"inlineData": {"mimeType": "application/pdf", "data": PDF}}]
    # One content for the step's results: both responses first, then each call's files.
    assert loopback.requests[1].json["contents"][-1] == {"role": "user", "parts": [
        {"functionResponse": {"id": "fc-1", **response}}, {"functionResponse": {"id": "fc-2", **response}},
        *files, *files]}


async def test_the_ui_stream_carries_the_files_and_the_model_gets_them_typed() -> None:
    model = ScriptedModel([Step(tool_calls=[call("report", {}, id="c1")]), "Done."])
    agent = make_agent(model, tools=[report], store=":memory:")
    chunks = [c async for c in agent.session("s").stream("Report?")]
    [output] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert output == {"type": "tool-output-available", "toolCallId": "c1", "output": ITEMS}
    result = model.requests[1].messages[-1]
    assert result.parts == [TextPart(text="The chart:"),
                            FilePart(media_type="image/png", data=PNG, filename="chart.png"),
                            FilePart(media_type="application/pdf", data=PDF, filename="q3.pdf")]


async def test_over_http_the_stream_and_the_stored_part_carry_a_tools_files(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC.tool_call("call_1", "report")), Reply.sse(ANTHROPIC.answer("Sales rose.")))
    agent = make_agent(ANTHROPIC.model(loopback), tools=[report], store=":memory:")
    async with api(agent) as http:
        _, chunks = await post_chat(http, transport_body("q3", [user("How was Q3?", "u1")]))
        history = (await http.get("/api/sessions/q3/messages")).json()["messages"]
    [output] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert output["output"] == ITEMS  # what useChat puts in the tool part a page shows
    [part] = [p for p in history[1]["parts"] if p.get("toolCallId") == "call_1"]
    assert part["output"] == ITEMS
    where, expected = RESULTS["anthropic"]
    assert where(loopback.requests[1].json) == expected


@tool(read_only=True)
def archive() -> list[Any]:
    """The sources, zipped."""
    return ["Here:", File(b"PK\x05\x06" + bytes(18), "application/zip", "src.zip")]


async def test_a_tools_file_the_provider_cannot_take_becomes_a_note_and_a_warning(loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(ANTHROPIC.tool_call("call_1", "archive")), Reply.sse(ANTHROPIC.answer("I cannot open it.")))
    recorder = Recorder()
    agent = make_agent(ANTHROPIC.model(loopback), tools=[archive], plugins=[recorder], store=":memory:")
    result = await agent.session("s").chat("Send the sources.")
    assert result.status == "completed"  # the tool ran: its result reaches the model, told what it cannot see
    error = "anthropic cannot take a file of type 'application/zip' (src.zip)"
    assert _anthropic_result(loopback.requests[1].json)["content"][0]["content"] == [
        {"type": "text", "text": "Here:"},
        {"type": "text", "text": f"[the tool returned a file the model cannot see: {error}]"}]
    second_step = recorder.contexts["on_step_finish"][1]
    assert second_step.warnings == [f"{error}; the tool's file was replaced by a note to the model"]


class Screenshotter:
    """Answers every ``report`` call with a screenshot of its own (a plugin's substitute)."""

    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        if ctx.tool_name == "report":
            return substitute(["From the cache of screens:", File(PNG, "image/png")])
        return None


async def test_a_plugins_substitute_and_a_streaming_tools_results_may_hold_files() -> None:
    @tool(read_only=True)
    async def render(pages: int) -> AsyncIterator[Any]:
        """Render pages, one preview per page."""
        for page in range(1, pages + 1):
            yield [f"page {page}", File(PNG, "image/png", f"p{page}.png")]

    model = ScriptedModel([Step(tool_calls=[call("render", {"pages": 2}, id="r"), call("report", {}, id="s")]), "ok"])
    agent = make_agent(model, tools=[render, report], plugins=[Screenshotter()], store=":memory:")
    chunks = [c async for c in agent.session("s").stream("Render.")]
    outputs = {(c["toolCallId"], c.get("preliminary", False)): c["output"]
               for c in chunks if c["type"] == "tool-output-available"}
    page = {"type": "file", "mediaType": "image/png", "url": PNG_URL}
    assert outputs[("r", True)] == [{"type": "text", "text": "page 2"}, {**page, "filename": "p2.png"}]
    assert outputs[("s", False)] == [{"type": "text", "text": "From the cache of screens:"}, page]
    results = {m.tool_call_id: m.parts for m in model.requests[1].messages[-2:]}
    assert results["s"] == [TextPart(text="From the cache of screens:"), FilePart(media_type="image/png", data=PNG)]
    assert results["r"] == [TextPart(text="page 2"), FilePart(media_type="image/png", data=PNG, filename="p2.png")]


async def test_the_tool_cache_serves_a_result_with_files_whole() -> None:
    ran: list[int] = []

    @tool(read_only=True)
    def snapshot() -> list[Any]:
        """A screenshot."""
        ran.append(1)
        return [File(PNG, "image/png")]

    model = ScriptedModel([Step(tool_calls=[call("snapshot", {})]), "one", Step(tool_calls=[call("snapshot", {})]), "two"])
    agent = make_agent(model, tools=[snapshot], plugins=[ToolCache()], store=":memory:")
    session = agent.session("s")
    await session.chat("Look.")
    await session.chat("Look again.")
    assert len(ran) == 1  # the second call was answered from the cache
    image = FilePart(media_type="image/png", data=PNG)
    assert model.requests[1].messages[-1].parts == model.requests[3].messages[-1].parts == [image]


def test_a_file_is_bytes_or_base64_with_a_media_type() -> None:
    assert File(PNG, "image/png").data == File(base64.b64decode(PNG), "image/png").data
    with pytest.raises(ValueError, match="base64"):
        File("not base64!", "image/png")
    with pytest.raises(ValueError, match="media type"):
        File(b"x", "png")
    with pytest.raises(TypeError, match="bytes or base64"):
        File(123, "image/png")  # type: ignore[arg-type]
    assert repr(File(b"abc", "text/plain", "a.txt")) == "File(<3 bytes>, media_type='text/plain', filename='a.txt')"


def test_a_file_from_a_path_guesses_its_type(tmp_path: Path) -> None:
    path = tmp_path / "dot.png"
    path.write_bytes(base64.b64decode(PNG))
    assert File.from_path(path).item() == {"type": "file", "mediaType": "image/png", "url": PNG_URL,
                                           "filename": "dot.png"}
    with pytest.raises(ValueError, match="media_type="):
        File.from_path(tmp_path / "noextension")


def test_a_list_without_files_stays_json() -> None:
    """Only a list holding a file is taken as text and files; other lists go as JSON, as before."""
    from think_core.files import tool_output_with_files

    assert tool_output_with_files(["a", "b"]) is None
    assert tool_output_with_files(["a", File(b"x", "text/plain"), {"n": 1}]) == [
        {"type": "text", "text": "a"}, {"type": "file", "mediaType": "text/plain", "url": "data:text/plain;base64,eA=="},
        {"type": "text", "text": '{"n": 1}'}]

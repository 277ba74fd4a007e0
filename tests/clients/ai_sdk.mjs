// The AI SDK's own React client — `useChat` from @ai-sdk/react with `DefaultChatTransport` —
// against `think serve --model demo`, exactly as the README's snippet sets it up.
import { useChat } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";
import { BASE, assert, lastAssistant, renderHook, run, storedMessages, text, toolPart, unique, waitFor } from "./lib.mjs";

const INTRODUCTION_START = "I am the offline demo model of think";

// The README's snippet: resume on mount, history loaded first. `resuming` counts the mount's
// resume probes (GET …/stream) still unanswered: useChat's status is "ready" before its probe
// is answered, and a message sent in that window is dropped from view by the client itself
// when the probe's 204 arrives (it sets the status back to "ready" for whatever request is in
// flight; see docs/frame-ordering.md). A person types after the page has loaded, so the checks
// send once the probe is answered.
function mountChat(id, messages = [], extra = {}) {
  const inner = extra.transport?.fetch ?? fetch;
  let resuming = 0;
  const tracked = async (url, init) => {
    const probe = (init?.method ?? "GET") === "GET" && String(url).endsWith("/stream");
    if (probe) resuming += 1;
    try {
      return await inner(url, init);
    } finally {
      if (probe) resuming -= 1;
    }
  };
  const hook = renderHook(() =>
    useChat({
      id,
      messages,
      resume: true,
      transport: new DefaultChatTransport({ api: `${BASE}/api/chat`, ...extra.transport, fetch: tracked }),
      ...extra.options,
    }),
  );
  return Object.assign(hook, { resuming: () => resuming });
}

// The README's stop button.
async function stopTurn(hook, id) {
  hook.result.current.stop();
  await fetch(`${BASE}/api/chat/${encodeURIComponent(id)}/stop`, { method: "POST" });
}

const settled = (hook) =>
  waitFor(() => hook.result.current.status === "ready" && hook.resuming() === 0 && hook.result.current, "status ready");

await run({
  async "resume on mount with nothing streaming is 204: no error"() {
    const hook = mountChat(unique("idle"));
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(hook.result.current.error, undefined);
    assert.equal(hook.result.current.status, "ready");
    hook.unmount();
  },

  async "a tool-calling turn streams to output-available and is stored"() {
    const id = unique("weather");
    const hook = mountChat(id);
    await settled(hook);
    hook.result.current.sendMessage({ text: "weather in Lisbon?" });
    await waitFor(() => hook.result.current.status === "streaming" || hook.result.current.status === "submitted", "the turn to start");
    const done = await settled(hook);
    assert.equal(toolPart(done.messages, "get_weather").state, "output-available");
    assert.match(text(lastAssistant(done.messages)), /Lisbon: 21°C and sunny/);
    const stored = await storedMessages(id);
    assert.deepEqual(stored.map((m) => m.role), ["user", "assistant"]);
    hook.unmount();
  },

  async "a page reloaded mid-turn shows the whole answer from its first word"() {
    const id = unique("reload");
    const first = mountChat(id);
    await settled(first);
    first.result.current.sendMessage({ text: "hello there" });
    await waitFor(() => text(lastAssistant(first.result.current.messages)).split(" ").length > 8, "a few words");
    // The reloaded page: history from the server, then `resume: true` asks for the running stream.
    const reloaded = mountChat(id, await storedMessages(id));
    const partial = await waitFor(() => {
      const t = text(lastAssistant(reloaded.result.current.messages));
      return t.length > 0 && reloaded.result.current.status === "streaming" && t;
    }, "the resumed stream");
    assert.ok(partial.startsWith("I "), partial); // its first word, not a tail
    const done = await settled(reloaded);
    const full = text(lastAssistant(done.messages));
    // Every state the reloaded page rendered showed a beginning of the answer, never a tail.
    const shown = reloaded.result.renders.map((r) => text(lastAssistant(r?.messages))).filter(Boolean);
    assert.ok(shown.length > 1 && shown.every((t) => full.startsWith(t)), JSON.stringify(shown.slice(0, 3)));
    await settled(first);
    assert.equal(full, text(lastAssistant(first.result.current.messages)));
    assert.ok(full.startsWith(INTRODUCTION_START) && full.endsWith("keep what was said."), full);
    assert.deepEqual(done.messages.map((m) => m.role), ["user", "assistant"]);
    first.unmount();
    reloaded.unmount();
  },

  async "a page reloaded mid-answer (its fetch aborted) resumes, and the answer is whole and stored once"() {
    const id = unique("reload-aborted");
    // The first page's fetch is aborted mid-answer, as a reload, a closed tab or a lost connection do.
    const connection = new AbortController();
    const abortable = (url, init = {}) =>
      fetch(url, { ...init, signal: init.signal ? AbortSignal.any([init.signal, connection.signal]) : connection.signal });
    const first = mountChat(id, [], { transport: { fetch: abortable } });
    await settled(first);
    first.result.current.sendMessage({ text: "hello there" });
    await waitFor(() => text(lastAssistant(first.result.current.messages)).split(" ").length > 8, "a few words");
    connection.abort();
    first.unmount();
    // The reloaded page: the history, then `resume: true` follows the turn the server ran on with.
    const reloaded = mountChat(id, await storedMessages(id));
    const partial = await waitFor(() => {
      const t = text(lastAssistant(reloaded.result.current.messages));
      return t.length > 0 && reloaded.result.current.status === "streaming" && t;
    }, "the resumed stream");
    assert.ok(partial.startsWith("I "), partial);
    const done = await settled(reloaded);
    const full = text(lastAssistant(done.messages));
    assert.ok(full.startsWith(INTRODUCTION_START) && full.endsWith("keep what was said."), full);
    const stored = await waitFor(async () => {
      const messages = await storedMessages(id);
      return messages.length === 2 && messages;
    }, "the answer stored");
    assert.equal(text(stored[1]), full);
    assert.equal(stored[1].metadata?.stopped, undefined);
    reloaded.unmount();
  },

  async "the stop button as the README wires it stops the turn; the partial answer is stored, marked stopped"() {
    const id = unique("stop");
    const hook = mountChat(id);
    await settled(hook);
    hook.result.current.sendMessage({ text: "tell me about yourself" });
    await waitFor(() => text(lastAssistant(hook.result.current.messages)).startsWith("I am the offline demo"), "a few words");
    // The README's stop button: useChat's stop() closes the fetch, the stop route stops the turn.
    await stopTurn(hook, id);
    await settled(hook);
    const stored = await waitFor(async () => {
      const messages = await storedMessages(id);
      return messages.length === 2 && messages[1].metadata?.stopped && messages;
    }, "the partial answer stored");
    assert.ok(text(stored[1]).startsWith("I am the offline demo"), JSON.stringify(stored));
    assert.ok(!text(stored[1]).endsWith("keep what was said."));
    // It stays stopped: nothing more is written to it.
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await storedMessages(id), stored);
    hook.unmount();
  },

  async "a tool that needs approval runs once approved"() {
    const id = unique("approve");
    const hook = mountChat(id, [], { options: { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses } });
    await settled(hook);
    hook.result.current.sendMessage({ text: "email ada@example.com: lunch at one?" });
    const asked = await waitFor(() => {
      const part = toolPart(hook.result.current.messages, "send_email");
      return part?.state === "approval-requested" && hook.result.current.status === "ready" && part;
    }, "the approval request");
    hook.result.current.addToolApprovalResponse({ id: asked.approval.id, approved: true });
    const done = await waitFor(
      () => toolPart(hook.result.current.messages, "send_email")?.state === "output-available" && hook.result.current.status === "ready" && hook.result.current,
      "the approved call's result",
    );
    assert.equal(toolPart(done.messages, "send_email").output, "sent to ada@example.com: lunch at one?");
    const stored = await storedMessages(id);
    assert.equal(toolPart(stored, "send_email").state, "output-available");
    hook.unmount();
  },

  async "a plugin's ask (before_tool_call) is an approval request with its reason"() {
    const id = unique("ask");
    const hook = mountChat(id, [], { options: { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses } });
    await settled(hook);
    hook.result.current.sendMessage({ text: "note: call Ana on 555-0123" });
    const asked = await waitFor(() => {
      const part = toolPart(hook.result.current.messages, "save_note");
      return part?.state === "approval-requested" && hook.result.current.status === "ready" && part;
    }, "the approval request demo_policy asked for");
    assert.equal(asked.approval.requestReason, "notes with a phone number need a human");
    const waiting = await storedMessages(id);
    assert.equal(toolPart(waiting, "save_note").approval.requestReason, "notes with a phone number need a human");
    assert.equal(waiting[1].metadata.decisions[asked.toolCallId].by, "demo_policy");
    hook.result.current.addToolApprovalResponse({ id: asked.approval.id, approved: true });
    const done = await waitFor(
      () => toolPart(hook.result.current.messages, "save_note")?.state === "output-available" && hook.result.current.status === "ready" && hook.result.current,
      "the approved call's result",
    );
    assert.equal(toolPart(done.messages, "save_note").output, "saved: call Ana on 555-0123");
    hook.unmount();
  },

  async "an error before any output: the client and the server hold the same messages, before and after a reload"() {
    const id = unique("fail");
    const hook = mountChat(id);
    await settled(hook);
    hook.result.current.sendMessage({ text: "please fail" });
    await waitFor(() => hook.result.current.status === "error" && hook.result.current.error, "the error");
    assert.match(hook.result.current.error.message, /fails on purpose/);
    const stored = await waitFor(async () => {
      const messages = await storedMessages(id);
      return messages.length === 1 && messages[0].metadata?.error && messages;
    }, "the failed turn stored");
    // No assistant message the server never stored (the one a `start` chunk would announce).
    assert.deepEqual(hook.result.current.messages.map((m) => [m.role, m.id]), stored.map((m) => [m.role, m.id]));
    hook.unmount();
    const reloaded = mountChat(id, stored);
    await settled(reloaded);
    assert.deepEqual(reloaded.result.current.messages.map((m) => m.id), stored.map((m) => m.id));
    reloaded.unmount();
  },

  async "a client-side tool is called in the browser and its result answered"() {
    const id = unique("client-tool");
    const clientTools = [{ name: "get_location", description: "Where the user is", parameters: { type: "object", properties: {} } }];
    let hook;
    hook = mountChat(id, [], {
      transport: { body: { clientTools } },
      options: {
        sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
        onToolCall: ({ toolCall }) => {
          if (toolCall.toolName === "get_location")
            hook.result.current.addToolOutput({ tool: "get_location", toolCallId: toolCall.toolCallId, output: { city: "Porto" } });
        },
      },
    });
    await settled(hook);
    hook.result.current.sendMessage({ text: "where am I?" });
    const done = await waitFor(
      () => /city: Porto/.test(text(lastAssistant(hook.result.current.messages))) && hook.result.current.status === "ready" && hook.result.current,
      "the answer from the client tool's result",
    );
    assert.equal(toolPart(done.messages, "get_location").state, "output-available");
    hook.unmount();
  },
});

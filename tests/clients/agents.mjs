// Cloudflare's agents client — `useAgent` from agents/react with `useAgentChat` from
// @cloudflare/ai-chat/react — against `think serve --model demo`, as the README's snippet sets
// it up. Several hooks on one session are several tabs.
import { useAgentChat } from "@cloudflare/ai-chat/react";
import { useAgent } from "agents/react";
import { BASE, HOST, assert, describeChat, lastAssistant, onFailure, renderHook, run, storedMessages, text, toolPart, unique, waitFor, within } from "./lib.mjs";

const INTRODUCTION_START = "I am the offline demo model of think";

// The README's snippet (plus onTurnEnd, recorded for the checks).
function mountTab(name, options = {}) {
  const turnEnds = [];
  const hook = renderHook(() => {
    const agent = useAgent({ agent: "think", name, host: HOST });
    const chat = useAgentChat({ agent, onTurnEnd: (event) => turnEnds.push(event), ...options });
    return { agent, ready: agent.ready, ...chat }; // agent.ready is reassigned per render: keep this one's
  });
  const tab = { ...hook, turnEnds, now: () => hook.result.current, committed: () => hook.result.committed };
  onFailure.push(() => describeChat(`tab ${name}`, tab.now()));
  return tab;
}

const connected = (tab) =>
  waitFor(() => tab.now()?.agent.identified && tab.now().status === "ready" && tab.now(), "the tab to connect");
const settled = (tab) => waitFor(() => tab.now().status === "ready" && !tab.now().isServerStreaming && tab.now(), "status ready");

async function postChat(id, messageText) {
  const response = await fetch(`${BASE}/api/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id, messages: [{ id: unique("u"), role: "user", parts: [{ type: "text", text: messageText }] }] }),
  });
  assert.equal(response.status, 200);
  await response.text();
}

await run({
  async "agent.ready resolves and the history comes from get-messages"() {
    const name = unique("ready");
    await postChat(name, "weather in Oslo?");
    const listed = await (await fetch(`${BASE}/agents/think/${name}/get-messages`)).json();
    assert.deepEqual(listed.map((m) => m.role), ["user", "assistant"]);
    const tab = mountTab(name);
    // agent.ready of the render React kept: a mounting render React dropped (and mounted anew,
    // with a new socket and a new ready promise) hands out a promise nothing ever settles.
    const ready = (await waitFor(() => tab.committed(), "the first commit")).agent.ready;
    await within(ready, "agent.ready (the identity frame)").catch(async (error) => {
      // Say what the client saw: which of the ready promises its renders handed out settled.
      const state = (promise) => Promise.race([promise.then(() => "resolved"), new Promise((r) => setTimeout(() => r("pending"), 50))]);
      const promises = [...new Set(tab.result.renders.filter(Boolean).map((r) => r.ready))];
      const states = await Promise.all(promises.map(state));
      error.message += ` (identified: ${tab.now().agent.identified}; ${tab.result.renders.length} renders handed out ` +
        `${promises.length} ready promise(s): ${states.join(", ")}; the awaited one is the last: ${ready === promises.at(-1)})`;
      throw error;
    });
    assert.equal(tab.now().agent.identified, true);
    assert.deepEqual(tab.now().messages.map((m) => m.id), listed.map((m) => m.id));
    tab.unmount();
  },

  async "a sent message never leaves the screen; status never ready before the stream; ids equal the server's"() {
    // The issue-33 property: a seeded history, a message sent as soon as the tab is ready.
    const name = unique("visible");
    await postChat(name, "weather in Lisbon?");
    const tab = mountTab(name);
    await connected(tab);
    const from = tab.result.renders.length;
    tab.now().sendMessage({ text: "weather in oslo" });
    const done = await waitFor(() => tab.turnEnds.length === 1 && settled(tab), "the turn's end");
    const sent = done.messages.filter((m) => m.role === "user").at(-1);
    assert.equal(text(sent), "weather in oslo");
    const after = tab.result.renders.slice(from).filter(Boolean);
    const shownAt = after.findIndex((r) => r.messages.some((m) => m.id === sent.id));
    assert.ok(shownAt >= 0 && after.slice(shownAt).every((r) => r.messages.some((m) => m.id === sent.id)),
      "the sent message vanished from a render");
    const statuses = after.map((r) => r.status).filter((s, i, all) => s !== all[i - 1]);
    assert.deepEqual(statuses.slice(statuses.indexOf("submitted")), ["submitted", "streaming", "ready"], statuses.join(" → "));
    const stored = await storedMessages(name);
    assert.deepEqual(done.messages.map((m) => m.id), stored.map((m) => m.id));
    tab.unmount();
  },

  async "a turn streams; onTurnEnd says completed and names the user message"() {
    const tab = mountTab(unique("turn"));
    await connected(tab);
    tab.now().sendMessage({ text: "weather in Tokyo?" });
    const done = await waitFor(() => tab.turnEnds.length === 1 && settled(tab), "the turn's end");
    const user = done.messages.find((m) => m.role === "user");
    assert.equal(tab.turnEnds[0].outcome, "completed");
    assert.deepEqual(tab.turnEnds[0].messageIds, [user.id]);
    assert.equal(toolPart(done.messages, "get_weather").state, "output-available");
    assert.match(text(lastAssistant(done.messages)), /Tokyo: 12°C and clear/);
    tab.unmount();
  },

  async "stop keeps the partial answer; onTurnEnd says aborted"() {
    const name = unique("stop");
    const tab = mountTab(name);
    await connected(tab);
    tab.now().sendMessage({ text: "tell me about yourself" });
    await waitFor(() => text(lastAssistant(tab.now().messages)).startsWith("I am the offline demo"), "a few words");
    tab.now().stop();
    await waitFor(() => tab.turnEnds.length === 1, "the turn's end");
    assert.equal(tab.turnEnds[0].outcome, "aborted");
    const stored = await waitFor(async () => {
      const messages = await storedMessages(name);
      return messages.length === 2 && messages;
    }, "the partial answer stored");
    assert.ok(text(stored[1]).startsWith("I am the offline demo") && !text(stored[1]).endsWith("keep what was said."));
    tab.unmount();
  },

  async "a tab opened mid-turn shows the whole answer from its first word"() {
    const name = unique("reload");
    const first = mountTab(name);
    await connected(first);
    first.now().sendMessage({ text: "hello there" });
    await waitFor(() => text(lastAssistant(first.now().messages)).split(" ").length > 8, "a few words");
    const reloaded = mountTab(name);
    const partial = await waitFor(() => {
      const t = text(lastAssistant(reloaded.now()?.messages));
      return t.length > 0 && (reloaded.now().status === "streaming" || reloaded.now().isServerStreaming) && t;
    }, "the resumed stream");
    assert.ok(partial.startsWith("I "), partial); // its first word, not a tail
    await waitFor(() => first.turnEnds.length === 1, "the first tab's turn end");
    const done = await settled(reloaded);
    const full = text(lastAssistant(done.messages));
    // Every state the reloaded page rendered showed a beginning of the answer, never a tail.
    const shown = reloaded.result.renders.map((r) => text(lastAssistant(r?.messages))).filter(Boolean);
    assert.ok(shown.length > 1 && shown.every((t) => full.startsWith(t)), JSON.stringify(shown.slice(0, 3)));
    assert.ok(full.startsWith(INTRODUCTION_START) && full.endsWith("keep what was said."), full);
    assert.equal(full, text(lastAssistant(first.now().messages)));
    assert.deepEqual(done.messages.map((m) => m.role), ["user", "assistant"]);
    first.unmount();
    reloaded.unmount();
  },

  async "setMessages replaces the stored transcript and reaches the other tab"() {
    const name = unique("edit");
    const tab = mountTab(name);
    const other = mountTab(name);
    await connected(tab);
    await connected(other);
    tab.now().sendMessage({ text: "weather in Lisbon?" });
    await waitFor(() => tab.turnEnds.length === 1 && other.now().messages.length === 2, "the turn in both tabs");
    const kept = tab.now().messages.slice(0, 1);
    tab.now().setMessages(kept);
    const stored = await waitFor(async () => {
      const messages = await storedMessages(name);
      return messages.length === 1 && messages;
    }, "the stored transcript replaced");
    assert.equal(stored[0].id, kept[0].id);
    await waitFor(() => other.now().messages.length === 1 && other.now().messages[0].id === kept[0].id, "the other tab updated");
    tab.unmount();
    other.unmount();
  },

  async "a tool that needs approval runs once approved"() {
    const name = unique("approve");
    const tab = mountTab(name);
    await connected(tab);
    tab.now().sendMessage({ text: "email ada@example.com: lunch at one?" });
    const asked = await waitFor(() => {
      const part = toolPart(tab.now().messages, "send_email");
      return part?.state === "approval-requested" && tab.turnEnds.length === 1 && part;
    }, "the approval request");
    tab.now().addToolApprovalResponse({ id: asked.approval.id, approved: true });
    const done = await waitFor(
      () => /sent to ada@example.com/.test(text(lastAssistant(tab.now().messages))) && settled(tab),
      "the answer after approval",
    );
    assert.equal(toolPart(done.messages, "send_email").state, "output-available", JSON.stringify(done.messages));
    const stored = await storedMessages(name);
    assert.equal(toolPart(stored, "send_email").output, "sent to ada@example.com: lunch at one?");
    tab.unmount();
  },

  async "a plugin's ask (before_tool_call) is an approval request with its reason"() {
    const name = unique("ask");
    const tab = mountTab(name);
    await connected(tab);
    tab.now().sendMessage({ text: "note: call Ana on 555-0123" });
    const asked = await waitFor(() => {
      const part = toolPart(tab.now().messages, "save_note");
      return part?.state === "approval-requested" && tab.turnEnds.length === 1 && part;
    }, "the approval request demo_policy asked for");
    assert.equal(asked.approval.requestReason, "notes with a phone number need a human", JSON.stringify(asked));
    tab.now().addToolApprovalResponse({ id: asked.approval.id, approved: true });
    const done = await waitFor(
      () => toolPart(tab.now().messages, "save_note")?.state === "output-available" && settled(tab),
      "the answer after approval",
    );
    assert.equal(toolPart(done.messages, "save_note").output, "saved: call Ana on 555-0123");
    const stored = await storedMessages(name);
    assert.equal(toolPart(stored, "save_note").approval.requestReason, "notes with a phone number need a human");
    tab.unmount();
  },

  async "a client-side tool runs in the page and the turn continues with its result"() {
    const name = unique("client-tool");
    // The README's snippet: `tools` sends the schema with each request, `onToolCall` answers.
    const tab = mountTab(name, {
      tools: { get_location: { description: "Where the user is", parameters: { type: "object", properties: {} },
                               execute: async () => ({ city: "Porto" }) } },
      onToolCall: async ({ toolCall, addToolOutput }) =>
        addToolOutput({ toolCallId: toolCall.toolCallId, output: { city: "Porto" } }),
    });
    await connected(tab);
    tab.now().sendMessage({ text: "where am I?" });
    await waitFor(
      () =>
        /city: Porto/.test(text(lastAssistant(tab.now().messages))) &&
        toolPart(tab.now().messages, "get_location")?.state === "output-available" &&
        settled(tab),
      "the answer from the client tool's result, beside the settled call",
    );
    // The resumed continuation is rebuilt from its stream: the server replays the message it
    // continues first, so the earlier text and the answered call never leave the screen.
    const continued = tab.result.renders.filter(Boolean).map((r) => lastAssistant(r.messages)).filter((m) => /Here is/.test(text(m)));
    assert.ok(continued.length > 0 && continued.every((m) => text(m).startsWith("Let me ask your browser.") &&
      toolPart([m], "get_location")?.state === "output-available"), "the continued message lost its earlier parts in a render");
    const stored = await storedMessages(name);
    assert.deepEqual(toolPart(stored, "get_location").output, { city: "Porto" });
    tab.unmount();
  },
});

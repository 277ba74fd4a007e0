// The AI SDK's `useChat` (with `DefaultChatTransport`, HTTP) and Cloudflare's `useAgentChat`
// (over the WebSocket) showing what an answer cites and the image a model made, against
// `think serve --model google:…` whose Gemini is a loopback server (see test_cited_answers.py):
// the answer grounded on Google Search comes with `source-url` parts, the drawn one with a
// `file` part, both as the server stores them and after a reload.
import { useChat } from "@ai-sdk/react";
import { useAgentChat } from "@cloudflare/ai-chat/react";
import { DefaultChatTransport } from "ai";
import { useAgent } from "agents/react";
import { BASE, HOST, assert, lastAssistant, renderHook, run, storedMessages, text, unique, waitFor } from "./lib.mjs";

// What the loopback Gemini answers (test_cited_answers.py passes it).
const EXPECTED = JSON.parse(process.env.THINK_EXPECTED ?? "{}");

// No `resume: true`: nothing is streaming when these pages open, and without the mount-time
// probe a message can be sent at once (see ai_sdk.mjs for the probe's race).
async function mountChat(id, messages = []) {
  const hook = renderHook(() => useChat({ id, messages, transport: new DefaultChatTransport({ api: `${BASE}/api/chat` }) }));
  await waitFor(() => hook.result.current?.status === "ready", "the first render");
  return hook;
}

const answered = (hook, count) =>
  waitFor(
    () => hook.result.current.status === "ready" && hook.result.current.messages.length === count && hook.result.current,
    `${count} messages, status ready`,
  );

const partsOf = (message, type) => (message?.parts ?? []).filter((p) => p.type === type);
const shown = (parts) => parts.map(({ sourceId, url, title, mediaType }) => ({ sourceId, url, title, mediaType }));

// A tab of useAgentChat, as the README's snippet sets it up (its history comes from the server).
function mountAgentChat(name) {
  const hook = renderHook(() => {
    const agent = useAgent({ agent: "think", name, host: HOST });
    return { agent, ...useAgentChat({ agent }) };
  });
  return { ...hook, now: () => hook.result.current };
}

const settled = (tab, count) =>
  waitFor(
    () => tab.now()?.agent.identified && tab.now().status === "ready" && !tab.now().isServerStreaming &&
      tab.now().messages.length === count && tab.now(),
    `${count} messages, status ready`,
  );

// What a tab shows of a conversation: a grounded answer's sources, then a drawn answer's image.
function checkShown(messages) {
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
  assert.equal(text(messages[1]), EXPECTED.groundedText);
  const sources = partsOf(messages[1], "source-url");
  assert.deepEqual(sources.map((p) => [p.url, p.title]), EXPECTED.sources);
  assert.equal(new Set(sources.map((p) => p.sourceId)).size, sources.length);
  assert.equal(text(messages[3]), EXPECTED.imageText);
  assert.deepEqual(partsOf(messages[3], "file").map((p) => [p.mediaType, p.url]), [["image/png", `data:image/png;base64,${EXPECTED.png}`]]);
}

let id;

await run({
  async "an answer's sources show as source-url parts, as the server stored them"() {
    id = unique("cited");
    const hook = await mountChat(id);
    hook.result.current.sendMessage({ text: "What is new in quantum computing?" });
    const done = await answered(hook, 2);
    const answer = lastAssistant(done.messages);
    assert.equal(text(answer), EXPECTED.groundedText);
    const sources = partsOf(answer, "source-url");
    assert.deepEqual(sources.map((p) => [p.url, p.title]), EXPECTED.sources);
    assert.equal(new Set(sources.map((p) => p.sourceId)).size, sources.length);
    const stored = await storedMessages(id);
    assert.deepEqual(stored.map((m) => m.id), done.messages.map((m) => m.id));
    assert.deepEqual(shown(partsOf(stored[1], "source-url")), shown(sources));
    hook.unmount();
  },

  async "a reloaded page shows them, and its next message brings an image as a file part"() {
    const reloaded = await mountChat(id, await storedMessages(id));
    assert.deepEqual(partsOf(lastAssistant(reloaded.result.current.messages), "source-url").map((p) => p.url), EXPECTED.sources.map(([url]) => url));
    // The transcript useChat sends now carries the source parts back: the server takes it.
    reloaded.result.current.sendMessage({ text: "Draw me a pixel" });
    const done = await answered(reloaded, 4);
    const answer = lastAssistant(done.messages);
    assert.equal(text(answer), EXPECTED.imageText);
    const [image] = partsOf(answer, "file");
    assert.equal(image?.mediaType, "image/png");
    assert.equal(image.url, `data:image/png;base64,${EXPECTED.png}`);
    const stored = await storedMessages(id);
    assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
    assert.deepEqual(partsOf(stored[3], "file").map((p) => [p.mediaType, p.url]), [[image.mediaType, image.url]]);
    assert.equal(partsOf(stored[1], "source-url").length, EXPECTED.sources.length); // the first answer kept them
    reloaded.unmount();
  },

  async "useAgentChat: the sources and the image come over the WebSocket, as the server stored them"() {
    id = unique("agent-cited");
    const tab = mountAgentChat(id);
    await settled(tab, 0);
    tab.now().sendMessage({ text: "What is new in quantum computing?" });
    await settled(tab, 2);
    assert.equal(partsOf(lastAssistant(tab.now().messages), "source-url").length, EXPECTED.sources.length);
    // The next request carries the transcript with the source parts back: the server takes it.
    tab.now().sendMessage({ text: "Draw me a pixel" });
    const done = await settled(tab, 4);
    checkShown(done.messages);
    const stored = await storedMessages(id);
    assert.deepEqual(stored.map((m) => m.id), done.messages.map((m) => m.id));
    for (const i of [1, 3]) assert.deepEqual(shown(partsOf(done.messages[i], "source-url")), shown(partsOf(stored[i], "source-url")));
    assert.deepEqual(shown(partsOf(done.messages[3], "file")), shown(partsOf(stored[3], "file")));
    tab.unmount();
  },

  async "useAgentChat: a reloaded tab shows them from the server's history"() {
    const reloaded = mountAgentChat(id);
    const done = await settled(reloaded, 4);
    checkShown(done.messages);
    reloaded.unmount();
  },
});

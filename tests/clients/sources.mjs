// The AI SDK's `useChat` (with `DefaultChatTransport`) showing what an answer cites and the
// image a model made, against `think serve --model google:…` whose Gemini is a loopback server
// (see test_cited_answers.py): the answer grounded on Google Search comes with `source-url`
// parts, the drawn one with a `file` part, both as the server stores them and after a reload.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport } from "ai";
import { BASE, assert, lastAssistant, renderHook, run, storedMessages, text, unique, waitFor } from "./lib.mjs";

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
});

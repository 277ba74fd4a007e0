// Files sent by the pinned chat clients — the AI SDK's `useChat` (`DefaultChatTransport`, HTTP)
// and Cloudflare's `useAgentChat` (WebSocket) — with `sendMessage({ text, files })`, against
// `think serve --model openai-compatible:…` whose model is a loopback server
// (test_client_attachments.py): it answers with what it received, so an answer naming the
// file's SHA-256 proves the image reached the model. A file over the server's --max-file is the
// chat's error, and nothing is stored.
import { createHash } from "node:crypto";
import { useChat } from "@ai-sdk/react";
import { useAgentChat } from "@cloudflare/ai-chat/react";
import { DefaultChatTransport } from "ai";
import { useAgent } from "agents/react";
import { BASE, HOST, assert, lastAssistant, renderHook, run, storedMessages, text, unique, waitFor } from "./lib.mjs";

// A 1x1 PNG in base64, as a browser's FileReader would hand it over (test_client_attachments.py passes it).
const PNG = process.env.THINK_PNG;
const sha = (base64) => createHash("sha256").update(Buffer.from(base64, "base64")).digest("hex").slice(0, 12);
const png = (filename, base64 = PNG) => ({ type: "file", mediaType: "image/png", filename, url: `data:image/png;base64,${base64}` });
// What the loopback model says about a message with one image (see test_client_attachments.py).
const seen = (base64, question) => `I see an image/png image (sha256 ${sha(base64)}) and the words "${question}".`;
// Over the server's --max-file of 2 KiB: a PNG signature and zeros.
const BIG = Buffer.concat([Buffer.from(PNG, "base64").subarray(0, 8), Buffer.alloc(4096)]).toString("base64");

function mountUseChat(id) {
  const hook = renderHook(() => useChat({ id, transport: new DefaultChatTransport({ api: `${BASE}/api/chat` }) }));
  return { ...hook, now: () => hook.result.current };
}

function mountAgentChat(name) {
  const hook = renderHook(() => {
    const agent = useAgent({ agent: "think", name, host: HOST });
    return { agent, ...useAgentChat({ agent }) };
  });
  return { ...hook, now: () => hook.result.current };
}

async function ready(tab, count) {
  try {
    return await waitFor(() => tab.now()?.status === "ready" && !tab.now().isServerStreaming && tab.now().messages.length === count && tab.now(), `${count} messages, status ready`);
  } catch (error) {
    const { status, error: failure, messages } = tab.now() ?? {};
    throw new Error(`${error.message} (status ${status}, error ${failure?.message}, messages ${JSON.stringify(messages?.map((m) => [m.role, text(m)]))})`);
  }
}

await run({
  async "useChat: sendMessage({ text, files }) — the model gets the image and its answer names it"() {
    const id = unique("files");
    const tab = mountUseChat(id);
    await waitFor(() => tab.now()?.status === "ready", "the first render");
    tab.now().sendMessage({ text: "What is in this picture?", files: [png("dot.png")] });
    const done = await ready(tab, 2);
    assert.equal(text(lastAssistant(done.messages)), seen(PNG, "What is in this picture?"));
    const stored = await storedMessages(id);
    assert.deepEqual(stored.map((m) => m.id), done.messages.map((m) => m.id));
    // Stored as useChat sent it: the file first, then the text.
    assert.deepEqual(stored[0].parts, [png("dot.png"), { type: "text", text: "What is in this picture?" }]);
    tab.unmount();
  },

  async "useChat: a file over --max-file is the chat's error (413) and nothing is stored"() {
    const id = unique("too-big");
    const tab = mountUseChat(id);
    await waitFor(() => tab.now()?.status === "ready", "the first render");
    tab.now().sendMessage({ text: "and this one?", files: [png("big.png", BIG)] });
    const failed = await waitFor(() => tab.now().status === "error" && tab.now(), "the chat's error");
    assert.match(String(failed.error?.message), /big\.png.*2,048 bytes/);
    assert.deepEqual(await storedMessages(id), []);
    tab.unmount();
  },

  async "useAgentChat: a file sent over the WebSocket reaches the model, is stored, and is in the reloaded history"() {
    const name = unique("ws-files");
    const tab = mountAgentChat(name);
    await waitFor(() => tab.now()?.agent.identified && tab.now().status === "ready", "the tab to connect");
    tab.now().sendMessage({ text: "And over the socket?", files: [png("socket.png")] });
    const done = await ready(tab, 2);
    assert.equal(text(lastAssistant(done.messages)), seen(PNG, "And over the socket?"));
    const stored = await storedMessages(name);
    assert.deepEqual(stored[0].parts, [png("socket.png"), { type: "text", text: "And over the socket?" }]);
    tab.unmount();
    const again = mountAgentChat(name);
    const reloaded = await ready(again, 2);
    assert.deepEqual(reloaded.messages[0].parts.filter((p) => p.type === "file"), [png("socket.png")]);
    again.unmount();
  },
});

// After `think serve` was SIGKILLed mid-turn and started again (the test that runs this does
// both), a page opened now follows the turn the server resumed, from its first word — with the
// AI SDK's useChat({ resume: true }) and with Cloudflare's useAgentChat.
import { useChat } from "@ai-sdk/react";
import { useAgentChat } from "@cloudflare/ai-chat/react";
import { DefaultChatTransport } from "ai";
import { useAgent } from "agents/react";
import { BASE, HOST, assert, lastAssistant, renderHook, run, storedMessages, text, waitFor } from "./lib.mjs";

const SESSION = process.env.THINK_SESSION;
const END = "keep what was said.";

async function followsTheResumedTurn(page) {
  const done = await waitFor(() => text(lastAssistant(page.result.current?.messages)).endsWith(END) && page.result.current, "the whole answer");
  const full = text(lastAssistant(done.messages));
  assert.ok(full.startsWith("I am the offline demo model of think"), full);
  const shown = page.result.renders.map((r) => text(lastAssistant(r?.messages))).filter(Boolean);
  assert.ok(shown.length > 1 && shown.every((t) => full.startsWith(t)), JSON.stringify(shown.slice(0, 3)));
  const stored = await waitFor(async () => {
    const messages = await storedMessages(SESSION);
    return messages.length === 2 && text(messages[1]).endsWith(END) && messages;
  }, "the answer stored once");
  assert.equal(text(stored[1]), full);
  page.unmount();
}

await run({
  async "pages opened after the restart follow the resumed turn from its first word"() {
    const history = await storedMessages(SESSION);
    assert.deepEqual(history.map((m) => m.role), ["user"]); // the answer is not stored yet: it is running
    const aiSdk = renderHook(() =>
      useChat({ id: SESSION, messages: history, resume: true, transport: new DefaultChatTransport({ api: `${BASE}/api/chat` }) }),
    );
    const agents = renderHook(() => useAgentChat({ agent: useAgent({ agent: "think", name: SESSION, host: HOST }) }));
    await Promise.all([followsTheResumedTurn(aiSdk), followsTheResumedTurn(agents)]);
  },
});

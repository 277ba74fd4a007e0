// Shared helpers of the client scripts: the server's address, a hook renderer (React without a
// DOM, the way a component would call the hooks), and waiting with generous deadlines.
import assert from "node:assert/strict";
import React from "react";
import TestRenderer from "react-test-renderer";
import { WebSocket } from "ws";

// What every WebSocket of this script sent and heard, the newest last: printed when a check
// fails, so a run that failed under load says which frame was missing or late.
const trace = [];
const started = Date.now();
function note(socket, what, data) {
  const text = typeof data === "string" ? data : data === undefined ? "" : `<${data.length ?? data.byteLength} bytes>`;
  trace.push(`${String(Date.now() - started).padStart(6)} ms ${socket.traceId} ${what} ${text.slice(0, 160)}`);
  if (trace.length > 200) trace.shift();
}
let sockets = 0;
/** Functions whose text is printed when a check fails (what the client showed then). */
export const onFailure = [];
/** A chat hook's visible state, short: status, then each message's role, id and parts. */
export function describeChat(label, chat) {
  const parts = (m) => (m.parts ?? []).map((p) => p.type === "text" ? `text:${JSON.stringify(p.text)}` : `${p.type}${p.state ? `:${p.state}` : ""}`);
  const lines = (chat?.messages ?? []).map((m) => `  ${m.role} ${m.id} [${parts(m).join(", ")}]`);
  return `${label}: status=${chat?.status} isServerStreaming=${chat?.isServerStreaming}\n${lines.join("\n")}`;
}
class TracedWebSocket extends WebSocket {
  constructor(...args) {
    super(...args);
    this.traceId = `ws${++sockets}`;
    note(this, "connect", String(args[0]));
    this.addEventListener("open", () => note(this, "open"));
    this.addEventListener("message", (event) => note(this, "in", event.data));
    this.addEventListener("close", (event) => note(this, "close", `${event.code} ${event.reason}`));
    this.addEventListener("error", (event) => note(this, "error", String(event.message ?? event)));
  }

  send(data, ...rest) {
    note(this, "out", data);
    return super.send(data, ...rest);
  }
}

// Node 20 has no global WebSocket; browsers (and Node 22) do. partysocket looks for the global.
globalThis.WebSocket ??= TracedWebSocket;
// React's act() environment flag: we drive updates from real network events, not act().
globalThis.IS_REACT_ACT_ENVIRONMENT = false;

export const BASE = process.env.THINK_URL ?? "http://127.0.0.1:8000";
export const HOST = new URL(BASE).host;
export const DEADLINE = 30_000;
export { assert };

/** Render `useHook(props)` in a component; `result.current` is its latest return value,
 * `result.committed` that of the latest render React committed (what is on screen).
 *
 * They differ: React may render a component that is mounting, drop that render and mount it
 * again from scratch (its refs and state made anew), as when an update arrives before the
 * first commit; a busy machine makes that common. A value that belongs to one render — the
 * agents client's `agent.ready` promise, say — is only settled by the render that was kept. */
export function renderHook(useHook, props = {}) {
  const result = { current: undefined, committed: undefined, renders: [] };
  function Probe(p) {
    const value = useHook(p);
    result.current = value;
    result.renders.push(value);
    React.useLayoutEffect(() => {
      result.committed = value;
    });
    return null;
  }
  // Suspense: useAgentChat suspends until its initial messages arrive.
  const tree = (p) => React.createElement(React.Suspense, { fallback: null }, React.createElement(Probe, p));
  const renderer = TestRenderer.create(tree(props));
  return {
    result,
    rerender: (next) => renderer.update(tree(next)),
    unmount: () => renderer.unmount(),
  };
}

/** `promise`, or an error naming `what` once `timeout` ms pass first (a promise that never
 * settles would hang the script until the test's own limit, saying nothing). */
export function within(promise, what, timeout = DEADLINE) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeout);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

export async function waitFor(check, what, timeout = DEADLINE) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value !== false && value !== undefined && value !== null) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export const text = (message) =>
  (message?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");

export const lastAssistant = (messages) => [...(messages ?? [])].reverse().find((m) => m.role === "assistant");

export const toolPart = (messages, name) =>
  (messages ?? []).flatMap((m) => m.parts).find((p) => p.type === `tool-${name}`);

export async function storedMessages(id) {
  const response = await fetch(`${BASE}/api/sessions/${encodeURIComponent(id)}/messages`);
  assert.equal(response.status, 200);
  return (await response.json()).messages;
}

/** Run the named checks in order; print one line each; exit non-zero on the first failure. */
export async function run(checks) {
  const only = process.argv[2];
  for (const [name, check] of Object.entries(checks)) {
    if (only && name !== only) continue;
    const started = Date.now();
    try {
      // A check that hangs (an await outside every waitFor) still fails with the frames it saw.
      await within(check(), "the check to finish", 4 * DEADLINE);
      console.log(`ok ${name} (${Date.now() - started} ms)`);
    } catch (error) {
      console.log(`FAIL ${name}: ${error?.stack ?? error}`);
      console.log(`WebSocket frames (newest last):\n${trace.join("\n")}`);
      for (const describe of onFailure) console.log(describe());
      process.exit(1);
    }
  }
  process.exit(0);
}

export const unique = (prefix) => `${prefix}-${Math.random().toString(36).slice(2, 10)}`;

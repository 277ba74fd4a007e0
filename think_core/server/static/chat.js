// The built-in chat page's script (served as a file: the page's CSP allows no inline script).
"use strict";
(() => {
  const params = new URLSearchParams(location.search);
  const sessionId = params.get("session") || "default";
  const token = params.get("token");
  const SUBPROTOCOL_CHARS = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;

  // Tools the browser executes itself (client tools): declared with every request.
  const CLIENT_TOOLS = {
    get_browser_time: {
      description: "The current date, time and time zone of the user's browser.",
      parameters: { type: "object", properties: {} },
      run: () => ({ iso: new Date().toISOString(), timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone }),
    },
    // What the demo's "where am I?" asks for. The browser's time zone and language are a guess at
    // where the user is that needs no permission prompt (geolocation would).
    get_location: {
      description: "Where the user probably is: the time zone and language of the user's browser.",
      parameters: { type: "object", properties: {} },
      run: () => ({ timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone, language: navigator.language }),
    },
  };
  // The states of a tool call (AI SDK names) as a person reads them.
  const STATE_LABELS = {
    "input-streaming": "preparing", "input-available": "running", "approval-requested": "waiting for approval",
    "approval-responded": "answered", "output-available": "done", "output-error": "failed", "output-denied": "denied",
  };
  const DECISION_LABELS = { allow: "allowed", block: "blocked", substitute: "substituted", ask: "asked" };

  const state = {
    messages: [],          // UIMessage objects, server-authoritative
    streams: new Map(),    // stream id -> assistant message being built
    mine: new Set(),       // stream ids this tab started (for the Stop button)
    decisions: new Map(),  // toolCallId -> {label, by}: live, from the timeline, until the answer is stored
    turns: new Map(),      // request id -> {events, status, trigger}; kept in localStorage
    openTools: new Set(),  // toolCallIds whose card the user opened
    rawInputs: new Map(),  // toolCallId -> streamed input text
    notes: new Map(),      // message id -> {error, aborted, retry}: stream events the snapshot lacks
    attached: [],          // file parts for the next message (Attach, paste, drop)
    expectContinuation: false,
  };
  let ws = null;
  let renderQueued = false;

  const $ = (id) => document.getElementById(id);
  $("session-id").textContent = sessionId;

  // -- connection ---------------------------------------------------------------------------
  function connect() {
    const url = new URL(`/agents/think/${encodeURIComponent(sessionId)}`, location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    // The token rides in Sec-WebSocket-Protocol, which no access log records; one that is not
    // a valid protocol name falls back to the ?token= query parameter.
    const protocols = [];
    if (token && SUBPROTOCOL_CHARS.test(token)) protocols.push("think", "bearer." + token);
    else if (token) url.searchParams.set("token", token);
    ws = new WebSocket(url, protocols);
    setStatus("connecting…", "");
    ws.onopen = () => {
      setStatus("connected", "connected");
      // A turn streaming now is replayed from its first word (resume handshake), then followed.
      ws.send(JSON.stringify({ type: "cf_agent_stream_resume_request" }));
    };
    ws.onclose = () => { setStatus("disconnected", "closed"); state.mine.clear(); updateButtons(); setTimeout(connect, 1000); };
    ws.onmessage = (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch { return; }
      onFrame(frame);
    };
  }
  function send(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(frame)); return true; }
    toast("not connected");
    return false;
  }
  function setStatus(text, cls) { const el = $("status"); el.textContent = text; el.className = "status " + cls; }

  // -- frames from the server -----------------------------------------------------------------
  function onFrame(frame) {
    switch (frame.type) {
      case "cf_agent_chat_messages":
        state.messages = frame.messages || [];
        for (const [id, msg] of state.streams) {
          const fresh = state.messages.find((m) => m.id === msg.id);
          if (fresh) state.streams.set(id, fresh);
        }
        break;
      case "cf_agent_message_updated": upsert(frame.message); break;
      case "cf_agent_chat_clear": clearLocal(); break;
      case "cf_agent_use_chat_response": onResponse(frame); break;
      case "cf_agent_stream_resuming": send({ type: "cf_agent_stream_resume_ack", id: frame.id }); return;
      case "think_timeline": onTimeline(frame); break;
      case "cf_agent_error": toast(frame.error && frame.error.message || "error"); break;
      default: return;
    }
    scheduleRender();
  }

  function upsert(message) {
    const i = state.messages.findIndex((m) => m.id === message.id);
    if (i >= 0) state.messages[i] = message; else state.messages.push(message);
  }

  function onResponse(frame) {
    // The continuation this tab's tool result or approval started counts as this tab's own.
    if (frame.continuation && state.expectContinuation && !state.streams.has(frame.id) && !frame.done) {
      state.expectContinuation = false;
      state.mine.add(frame.id);
      updateButtons();
    }
    if (frame.done) {
      if (frame.error && frame.body) toast(frame.body);
      state.streams.delete(frame.id);
      state.mine.delete(frame.id);
      updateButtons();
      return;
    }
    let chunk;
    try { chunk = JSON.parse(frame.body); } catch { return; }
    applyChunk(frame.id, chunk);
  }

  function streamMessage(streamId, messageId) {
    let msg = state.streams.get(streamId);
    if (!msg) {
      const id = messageId || streamId;
      msg = state.messages.find((m) => m.id === id);
      if (!msg) { msg = { id, role: "assistant", parts: [] }; state.messages.push(msg); }
      state.streams.set(streamId, msg);
    }
    return msg;
  }

  function findToolPart(toolCallId) {
    for (let i = state.messages.length - 1; i >= 0; i--) {
      const part = state.messages[i].parts.find((p) => p.toolCallId === toolCallId);
      if (part) return part;
    }
    return null;
  }

  function lastOpen(msg, kind, id) {
    for (let i = msg.parts.length - 1; i >= 0; i--) {
      const p = msg.parts[i];
      if (p.type === kind && p._id === id) return p;
    }
    const part = { type: kind, text: "", _id: id };
    msg.parts.push(part);
    return part;
  }

  function applyChunk(streamId, chunk) {
    const msg = streamMessage(streamId, chunk.type === "start" ? chunk.messageId : undefined);
    switch (chunk.type) {
      case "start-step": msg.parts.push({ type: "step-start" }); break;
      case "text-start": case "reasoning-start":
        msg.parts.push({ type: chunk.type.split("-")[0], text: "", _id: chunk.id }); break;
      case "text-delta": lastOpen(msg, "text", chunk.id).text += chunk.delta; break;
      case "reasoning-delta": lastOpen(msg, "reasoning", chunk.id).text += chunk.delta; break;
      case "tool-input-start":
        msg.parts.push({ type: "tool-" + chunk.toolName, toolCallId: chunk.toolCallId, state: "input-streaming" }); break;
      case "tool-input-delta":
        state.rawInputs.set(chunk.toolCallId, (state.rawInputs.get(chunk.toolCallId) || "") + chunk.inputTextDelta); break;
      case "tool-input-available": {
        let part = findToolPart(chunk.toolCallId);
        if (!part) { part = { type: "tool-" + chunk.toolName, toolCallId: chunk.toolCallId }; msg.parts.push(part); }
        Object.assign(part, { state: "input-available", input: chunk.input });
        if (CLIENT_TOOLS[chunk.toolName] && state.mine.has(streamId)) runClientTool(chunk);
        break;
      }
      case "tool-output-available": {
        const part = findToolPart(chunk.toolCallId);
        // A preliminary output (a streaming tool, a sub-agent's progress) is shown as it comes.
        if (part) Object.assign(part, { state: "output-available", output: chunk.output, preliminary: !!chunk.preliminary });
        break;
      }
      case "tool-output-error": {
        const part = findToolPart(chunk.toolCallId);
        if (part) Object.assign(part, { state: "output-error", errorText: chunk.errorText });
        break;
      }
      case "tool-output-denied": {
        const part = findToolPart(chunk.toolCallId);
        if (part) part.state = "output-denied";
        break;
      }
      case "tool-approval-request": {
        const part = findToolPart(chunk.toolCallId);
        if (part) {
          part.state = "approval-requested";
          part.approval = chunk.reason ? { id: chunk.approvalId, requestReason: chunk.reason } : { id: chunk.approvalId };
        }
        break;
      }
      // What the answer cites and the files the model made: the chunk is the part (as useChat builds it).
      case "source-url": case "source-document": case "file": msg.parts.push({ ...chunk }); break;
      case "error": note(msg.id).error = chunk.errorText; break;
      case "abort": note(msg.id).aborted = true; break;
      case "data-think-retry": note(msg.id).retry = chunk.data || {}; break;
      default: break;
    }
  }

  function note(messageId) {
    if (!state.notes.has(messageId)) state.notes.set(messageId, {});
    return state.notes.get(messageId);
  }

  function runClientTool(chunk) {
    let output, errorText;
    try { output = CLIENT_TOOLS[chunk.toolName].run(chunk.input || {}); }
    catch (e) { errorText = String(e); }
    const frame = { type: "cf_agent_tool_result", toolCallId: chunk.toolCallId, toolName: chunk.toolName, autoContinue: true };
    if (errorText === undefined) frame.output = output; else Object.assign(frame, { state: "output-error", errorText });
    if (send(frame)) expectContinuation();
  }

  // The continuation an answer starts reaches this tab through the resume handshake (all of it,
  // from its first chunk), like a turn that was already streaming when the page loaded.
  function expectContinuation() {
    state.expectContinuation = true;
    send({ type: "cf_agent_stream_resume_request" });
  }

  function onTimeline(frame) {
    const ev = frame.event || {};
    recordEvent(ev.requestId || frame.id, ev);
    saveTimeline();
  }

  function recordEvent(key, ev) {
    let turn = state.turns.get(key);
    if (!turn) { turn = { events: [], status: "running", trigger: ev.trigger || "" }; state.turns.set(key, turn); }
    turn.events.push(ev);
    if (ev.hook === "before_turn") turn.trigger = ev.trigger + (ev.continuation ? " · continuation" : "");
    if (ev.hook === "on_chat_response") turn.status = ev.status;
    if (ev.hook === "after_tool_call") state.decisions.set(ev.toolCallId, { label: ev.label, by: ev.decidedBy || "" });
  }

  // The timeline is this page's view of the hooks, not part of the conversation: the server
  // does not keep it, so the page does (per session, the last turns), to survive a reload.
  const TIMELINE_KEY = "think.timeline." + sessionId;
  const MAX_SAVED_TURNS = 50;
  function saveTimeline() {
    try {
      const turns = [...state.turns].slice(-MAX_SAVED_TURNS).map(([id, t]) => [id, t.events]);
      localStorage.setItem(TIMELINE_KEY, JSON.stringify(turns));
    } catch { /* storage full or disabled: the live timeline still works */ }
  }
  function loadTimeline() {
    let saved;
    try { saved = JSON.parse(localStorage.getItem(TIMELINE_KEY) || "[]"); } catch { saved = []; }
    if (!Array.isArray(saved)) return;
    for (const entry of saved) {
      if (!Array.isArray(entry) || !Array.isArray(entry[1])) continue;
      for (const ev of entry[1]) if (ev && typeof ev === "object") recordEvent(String(entry[0]), ev);
    }
  }

  // -- sending --------------------------------------------------------------------------------
  function newId(prefix) { return prefix + "_" + Math.random().toString(36).slice(2, 10) + Date.now().toString(36); }

  function submit(text) {
    // As useChat's sendMessage({ text, files }) builds it: the files first, then the text.
    const parts = [...state.attached, ...(text ? [{ type: "text", text }] : [])];
    const message = { id: newId("msg"), role: "user", parts };
    const clientTools = Object.entries(CLIENT_TOOLS).map(([name, t]) => ({ name, description: t.description, parameters: t.parameters }));
    const requestId = newId("req");
    const body = { messages: [...state.messages.map(strip), message], trigger: "submit-message", clientTools };
    if (!send({ type: "cf_agent_use_chat_request", id: requestId, init: { method: "POST", body: JSON.stringify(body) } })) return false;
    state.messages.push(message);
    state.attached = [];
    renderAttached();
    state.mine.add(requestId);
    updateButtons();
    scheduleRender();
    return true;
  }
  function strip(m) {
    return { id: m.id, role: m.role, parts: m.parts.map(({ _id, ...p }) => p), metadata: m.metadata };
  }

  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text && !state.attached.length) return;
    commitClear();  // a message sent after Clear starts the new conversation
    // Not connected: the message stays in the box (never thrown away), to send once reconnected.
    if (submit(text)) $("input").value = "";
    else toast("not connected: your message is kept in the box — send it again once connected");
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  // -- attachments ---------------------------------------------------------------------------
  // A file is read into a data URL here; the server checks its size and that its bytes are what
  // its type says (a refusal comes back as a toast, and nothing is stored).
  function readFile(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve({
        type: "file", mediaType: file.type || "application/octet-stream", filename: file.name || "pasted", url: reader.result,
      });
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }
  async function attach(files) {
    for (const file of files) {
      try { state.attached.push(await readFile(file)); }
      catch (e) { toast(`cannot read ${file.name}: ${e}`); }
    }
    renderAttached();
  }
  function renderAttached() {
    $("attachments").innerHTML = state.attached.map((part, i) =>
      `<span class="pending-file">${fileView(part)}<button type="button" data-detach="${i}" title="Remove">×</button></span>`).join("");
    $("attachments").style.display = state.attached.length ? "flex" : "none";
  }
  $("attach").addEventListener("click", () => $("file-input").click());
  $("file-input").addEventListener("change", (e) => { attach([...e.target.files]); e.target.value = ""; });
  $("attachments").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-detach]");
    if (!button) return;
    state.attached.splice(Number(button.dataset.detach), 1);
    renderAttached();
  });
  $("input").addEventListener("paste", (e) => {
    const files = [...(e.clipboardData ? e.clipboardData.files : [])];
    if (files.length) { e.preventDefault(); attach(files); }
  });
  $("chat").addEventListener("dragover", (e) => {
    if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) { e.preventDefault(); $("chat").classList.add("dropping"); }
  });
  $("chat").addEventListener("dragleave", () => $("chat").classList.remove("dropping"));
  $("chat").addEventListener("drop", (e) => {
    $("chat").classList.remove("dropping");
    const files = [...(e.dataTransfer ? e.dataTransfer.files : [])];
    if (files.length) { e.preventDefault(); attach(files); }
  });

  $("stop").addEventListener("click", () => { for (const id of state.mine) send({ type: "cf_agent_chat_request_cancel", id }); });
  // Clearing deletes the conversation on the server for every browser: only once confirmed, and
  // only after UNDO_SECONDS in which Undo brings it back (nothing was sent yet). Sending a message
  // or leaving the page clears at once.
  const UNDO_SECONDS = 8;
  let pendingClear = null;
  function clearLocal() {
    state.messages = []; state.streams.clear(); state.decisions.clear(); state.turns.clear(); state.notes.clear();
    saveTimeline();
  }
  function commitClear() {
    if (!pendingClear) return;
    clearTimeout(pendingClear);
    pendingClear = null;
    $("undo").style.display = "none";
    if (send({ type: "cf_agent_chat_clear" })) clearLocal();
    scheduleRender();
  }
  $("clear").addEventListener("click", () => {
    if (pendingClear) return;
    const question = `Delete this conversation on the server, for everyone viewing it? You can undo it for ${UNDO_SECONDS} seconds.`;
    if (!window.confirm(question)) return;
    pendingClear = setTimeout(commitClear, UNDO_SECONDS * 1000);
    $("undo").style.display = "block";
    scheduleRender();
  });
  $("undo-button").addEventListener("click", () => {
    clearTimeout(pendingClear);
    pendingClear = null;
    $("undo").style.display = "none";
    scheduleRender();
  });
  window.addEventListener("pagehide", commitClear);
  $("toggle-timeline").addEventListener("click", () => {
    const open = document.body.classList.toggle("timeline-open");
    $("toggle-timeline").setAttribute("aria-expanded", String(open));
  });
  // A tool card stays as the user left it across re-renders (toggle does not bubble: capture).
  $("messages").addEventListener("toggle", (e) => {
    const card = e.target;
    if (!card.matches || !card.matches("details.tool")) return;
    if (card.open) state.openTools.add(card.dataset.call); else state.openTools.delete(card.dataset.call);
  }, true);
  $("messages").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-approve]");
    if (!button) return;
    if (send({ type: "cf_agent_tool_approval", toolCallId: button.dataset.call, approved: button.dataset.approve === "yes", autoContinue: true })) {
      expectContinuation();
    }
    button.parentElement.querySelectorAll("button").forEach((b) => (b.disabled = true));
  });
  function updateButtons() { $("stop").disabled = state.mine.size === 0; }

  // -- rendering ----------------------------------------------------------------------------------
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));

  function toolName(part) { return part.type === "dynamic-tool" ? part.toolName : part.type.slice(5); }

  // Model output is untrusted: marked turns Markdown into HTML, DOMPurify removes anything
  // that could run (script, event handlers, javascript: URLs) or fetch (images, styles).
  const PURIFY = { FORBID_TAGS: ["style", "img", "svg", "math", "form", "input", "button", "textarea", "select"], FORBID_ATTR: ["style"] };
  const markdownReady = typeof window.marked !== "undefined" && typeof window.DOMPurify !== "undefined";
  if (markdownReady) {
    window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
    });
  }
  function markdown(text) {
    if (!markdownReady) return esc(text);
    return window.DOMPurify.sanitize(window.marked.parse(String(text), { gfm: true, breaks: true }), PURIFY);
  }

  // Who decided a call: what the stored answer records (every browser, every server sees the
  // same); while the answer still streams, what this page's timeline saw. Looked up per message,
  // so two calls with one id in different answers never borrow each other's decision.
  function decisionOf(part, m) {
    const stored = m.metadata && m.metadata.decisions && m.metadata.decisions[part.toolCallId];
    if (stored) {
      const rewritten = Array.isArray(stored.rewrittenBy) ? stored.rewrittenBy.join(", ") : "";
      return { label: DECISION_LABELS[stored.decision] || String(stored.decision), by: stored.by || "", rewritten };
    }
    const streaming = [...state.streams.values()].some((s) => s.id === m.id);
    const live = streaming ? state.decisions.get(part.toolCallId) : null;
    if (live) return live;
    // A call that ran with nobody deciding otherwise (the server records only blocks and substitutes).
    return part.state === "output-available" || part.state === "output-error" ? { label: "allowed", by: "" } : null;
  }

  // A sub-agent's result or progress (agent.as_tool): {session_id, status, text, tools}.
  function isSubagent(output) {
    return !!output && typeof output === "object" && typeof output.session_id === "string" &&
      typeof output.status === "string" && typeof output.text === "string" && Array.isArray(output.tools);
  }

  function renderSubagent(output) {
    let html = `<div class="label">sub-agent <span class="session">${esc(output.session_id)}</span> · ${esc(output.status)}</div>`;
    html += `<div class="subagent">`;
    if (output.text) html += `<div class="text">${markdown(output.text)}</div>`;
    for (const call of output.tools) {
      if (call && typeof call === "object") html += `<div class="subtool" data-state="${esc(call.state)}">${esc(call.tool)} · ${esc(call.state)}</div>`;
    }
    return html + `</div>`;
  }

  // A file part (a user's attachment, a file a tool returned or a model made): images inline
  // (raster types only, from data URLs: the page's CSP allows no other image source), any other
  // file as a chip naming it, a link to save it.
  const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
  function fileView(part) {
    const url = String(part.url || "");
    const type = String(part.mediaType || "");
    const name = part.filename || type || "file";
    if (INLINE_IMAGES.has(type) && url.startsWith("data:")) {
      return `<img class="attachment" src="${esc(url)}" alt="${esc(name)}" title="${esc(name)}">`;
    }
    const link = url.startsWith("data:") || url.startsWith("https://") ? ` href="${esc(url)}" download="${esc(name)}" target="_blank" rel="noopener noreferrer"` : "";
    return `<a class="file-chip"${link} title="${esc(type)}">${esc(name)} <span class="type">${esc(type)}</span></a>`;
  }
  function isFilePart(v) { return !!v && typeof v === "object" && v.type === "file" && typeof v.url === "string"; }
  // A tool output that carries files: a list of text and file items (what the engine stores for a tool's File results).
  function filesOutput(output) {
    return Array.isArray(output) && output.some(isFilePart) && output.every((v) => isFilePart(v) || (v && v.type === "text"));
  }
  function renderFilesOutput(output) {
    let html = `<div class="label">output</div><div class="files-output">`;
    for (const item of output) html += isFilePart(item) ? fileView(item) : `<pre class="output">${esc(item.text)}</pre>`;
    return html + `</div>`;
  }

  function renderTool(part, m) {
    const name = toolName(part);
    const decision = decisionOf(part, m);
    const client = CLIENT_TOOLS[name] ? '<span class="badge">client tool</span>' : "";
    // Open while it needs an answer, and while a sub-agent works (its progress is the point).
    const working = part.preliminary && isSubagent(part.output);
    const open = part.state === "approval-requested" || working || state.openTools.has(part.toolCallId);
    let html = `<details class="tool" data-tool="${esc(name)}" data-call="${esc(part.toolCallId)}" data-state="${esc(part.state || "")}"${open ? " open" : ""}>`;
    html += `<summary class="head"><span class="name">${esc(name)}</span>${client}`;
    const stateLabel = part.preliminary ? "working" : STATE_LABELS[part.state] || part.state || "";
    html += `<span class="badge state ${esc(part.state || "")}">${esc(stateLabel)}</span>`;
    if (decision) {
      const by = decision.by ? ` by ${decision.by}` : "";
      html += `<span class="badge decision ${esc(decision.label)}" title="before_tool_call decision${esc(by)}">${esc(decision.label)}</span>`;
      if (decision.by) html += `<span class="badge plugin" title="the plugin that decided">${esc(decision.by)}</span>`;
      if (decision.rewritten) html += `<span class="badge rewritten" title="transform_tool_result changed the output">rewritten by ${esc(decision.rewritten)}</span>`;
    }
    html += `</summary>`;
    const input = part.input !== undefined ? part.input : state.rawInputs.get(part.toolCallId);
    if (input !== undefined && input !== null) html += `<div class="label">input</div><pre class="input">${esc(pretty(input))}</pre>`;
    if (part.state === "output-available" && isSubagent(part.output)) html += renderSubagent(part.output);
    else if (part.state === "output-available" && filesOutput(part.output)) html += renderFilesOutput(part.output);
    else if (part.state === "output-available") html += `<div class="label">output</div><pre class="output">${esc(pretty(part.output))}</pre>`;
    if (part.state === "output-error" || part.state === "output-denied") html += `<div class="label">error</div><pre class="output">${esc(part.errorText || "denied")}</pre>`;
    const reason = part.approval && part.approval.requestReason;
    if (part.state === "approval-requested" && reason) html += `<div class="label">why</div><div class="reason">${esc(reason)}</div>`;
    if (part.state === "approval-requested") {
      html += `<div class="actions"><button data-approve="yes" data-call="${esc(part.toolCallId)}">Approve</button>` +
              `<button data-approve="no" data-call="${esc(part.toolCallId)}">Deny</button></div>`;
    }
    return html + `</details>`;
  }

  // What an answer cites (its source-url and source-document parts, each source once), listed
  // under it. A provider's URL is untrusted: only an http(s) one becomes a link (never
  // javascript: or data:), and every title is text.
  function sourceUrl(url) {
    try {
      const parsed = new URL(String(url));
      return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed : null;
    } catch { return null; }
  }
  function sourceItem(part) {
    if (part.type === "source-document") {
      const name = part.title || part.filename || "document";
      return `<li class="source document" data-type="${esc(part.mediaType || "")}">${esc(name)} <span class="type">${esc(part.mediaType || "")}</span></li>`;
    }
    const link = sourceUrl(part.url);
    const title = part.title || String(part.url);
    if (!link) return `<li class="source">${esc(title)}</li>`;
    const host = link.host !== title ? ` <span class="host">${esc(link.host)}</span>` : "";
    return `<li class="source"><a href="${esc(link.href)}" target="_blank" rel="noopener noreferrer" title="${esc(link.href)}">${esc(title)}</a>${host}</li>`;
  }
  function renderSources(m) {
    const seen = new Set();
    let items = "";
    for (const part of m.parts || []) {
      if (part.type !== "source-url" && part.type !== "source-document") continue;
      const key = part.type === "source-url" ? "url " + part.url : "doc " + part.mediaType + " " + part.title;
      if (seen.has(key)) continue;
      seen.add(key);
      items += sourceItem(part);
    }
    return items ? `<div class="sources"><div class="label">sources</div><ol>${items}</ol></div>` : "";
  }

  function retryText(r) {
    const cause = r.status || r.classification || "an error";
    // After a fallback the step is asked of another model at once: say which.
    const when = r.model ? `on ${r.model}` : `in ${Number(r.delay || 0).toFixed(1)} s`;
    return `retrying ${when} after ${cause} (attempt ${r.attempt || 1})`;
  }

  // The error of a turn: live from the stream, or — after a reload — from the message's
  // metadata (a failed turn's partial answer carries it; with no answer, the message it answered).
  function errorOf(m) {
    const extra = state.notes.get(m.id);
    return (extra && extra.error) || (m.metadata && typeof m.metadata.error === "string" ? m.metadata.error : "");
  }

  function renderMessage(m, i) {
    let body = "";
    for (const part of m.parts || []) {
      if (part.type === "text") body += m.role === "assistant" ? `<div class="text">${markdown(part.text)}</div>` : `<div class="text">${esc(part.text)}</div>`;
      else if (part.type === "reasoning") body += `<div class="reasoning">${esc(part.text)}</div>`;
      else if (isFilePart(part)) body += `<div class="file">${fileView(part)}</div>`;
      else if (part.toolCallId) body += renderTool(part, m);
    }
    const extra = state.notes.get(m.id) || {};
    const error = errorOf(m);
    if (m.role === "user") {
      let html = `<div class="msg" data-role="user" data-id="${esc(m.id)}">${body}</div>`;
      // Failed before any output: the error stands as the assistant's answer, unless a live
      // stream (which shows the error itself) follows.
      const next = state.messages[i + 1];
      if (error && !(next && next.role === "assistant")) html += errorBubble(m.id, error);
      return html;
    }
    body += renderSources(m);
    if (extra.retry && !error) body += `<div class="retry">${esc(retryText(extra.retry))}</div>`;
    if (error) body += `<div class="error">⚠ ${esc(error)}</div>`;
    // Stopped: live from the stream, or — after a reload — from the stored answer's metadata.
    if (extra.aborted || (m.metadata && m.metadata.stopped)) body += `<div class="aborted">stopped</div>`;
    // The plugins whose transform_stream shaped this answer (redact, ...), from the stored answer.
    const shaped = m.metadata && Array.isArray(m.metadata.transformedBy) ? m.metadata.transformedBy : [];
    if (shaped.length) body += `<div class="shaped" title="transform_stream">shaped by ${esc(shaped.join(", "))}</div>`;
    return `<div class="msg${error ? " failed" : ""}" data-role="${esc(m.role)}" data-id="${esc(m.id)}">${body}</div>`;
  }

  function errorBubble(id, error) {
    return `<div class="msg failed" data-role="assistant" data-error-for="${esc(id)}"><div class="error">⚠ ${esc(error)}</div></div>`;
  }

  function renderTimeline() {
    if (!state.turns.size) return '<div class="empty">Each turn\'s hooks appear here.</div>';
    let html = "";
    for (const [id, turn] of state.turns) {
      html += `<div class="turn" data-request="${esc(id)}"><div class="title"><span>${esc(turn.trigger || "turn")}</span>` +
              `<span class="status-${esc(turn.status)}">${esc(turn.status)}</span></div>`;
      for (const ev of turn.events) {
        const bits = [];
        if (ev.step !== undefined) bits.push(esc("step " + ev.step));
        if (ev.tool) bits.push(esc(ev.tool));
        // before_tool_call is where the decision is taken: it shows it (known once the call ended).
        const decided = ev.hook === "before_tool_call" &&
          turn.events.find((e) => e.hook === "after_tool_call" && e.toolCallId === ev.toolCallId);
        if (decided && decided.label) bits.push(`<span class="badge decision ${esc(decided.label)}">${esc(decided.label)}</span>` + (decided.decidedBy ? ` by ${esc(decided.decidedBy)}` : ""));
        if (ev.label) bits.push(`<span class="badge decision ${esc(ev.label)}">${esc(ev.label)}</span>` + (ev.decidedBy ? ` by ${esc(ev.decidedBy)}` : ""));
        if (ev.finish_reason) bits.push(esc(ev.finish_reason));
        if (ev.status) bits.push(esc(ev.status));
        if (ev.error) bits.push(esc(ev.error));
        html += `<div class="timeline-event" data-hook="${esc(ev.hook)}"><span class="t">+${Number(ev.t_ms || 0).toFixed(1)}ms</span>` +
                `<span><span class="hook ${esc(ev.hook)}">${esc(ev.hook)}</span> <span class="detail">${bits.join(" · ")}</span></span></div>`;
      }
      html += `</div>`;
    }
    return html;
  }

  function render() {
    renderQueued = false;
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const shown = pendingClear ? [] : state.messages;  // cleared, until Undo or the clear is sent
    box.innerHTML = shown.length ? shown.map(renderMessage).join("") : '<div class="empty">Say hello to start.</div>';
    if (atBottom) box.scrollTop = box.scrollHeight;
    const tl = $("timeline");
    tl.innerHTML = pendingClear ? '<div class="empty">Each turn\'s hooks appear here.</div>' : renderTimeline();
    tl.scrollTop = tl.scrollHeight;
  }
  function scheduleRender() { if (!renderQueued) { renderQueued = true; requestAnimationFrame(render); } }

  let toastTimer = null;
  function toast(text) {
    const el = $("toast");
    el.textContent = text; el.style.display = "block";
    clearTimeout(toastTimer); toastTimer = setTimeout(() => (el.style.display = "none"), 5000);
  }

  loadTimeline();
  render();
  connect();
})();

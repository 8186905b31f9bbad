// The demo page's chat: the default app's "chat" agent, its answers rendered as they stream
// (model_delta events, reassembled by MessageText), resumed after a drop from the page's cursor.
import { MessageText, RoostClient, actorUrl } from "./roost.js";

const $ = (id) => document.getElementById(id);

const chat = { client: null, texts: new MessageText(), runs: new Map(), lastSeq: null, gaps: 0 };

function item(runId) {
  let entry = chat.runs.get(runId);
  if (!entry) {
    const user = document.createElement("li");
    user.className = "user";
    const answer = document.createElement("li");
    answer.className = "assistant streaming";
    answer.dataset.runId = runId;
    $("chat-log").append(user, answer);
    entry = { user, answer, messages: [] };
    chat.runs.set(runId, entry);
  }
  return entry;
}

function counters() {
  const c = chat.client;
  $("chat-reconnects").textContent = String(c ? c.reconnects : 0);
  $("chat-gaps").textContent = String(chat.gaps + chat.texts.gaps);
  $("chat-duplicates").textContent = String((c ? c.duplicates : 0) + chat.texts.duplicates);
}

function onEvent(seq, ev) {
  if (chat.lastSeq !== null && seq !== chat.lastSeq + 1) chat.gaps += Math.max(0, seq - chat.lastSeq - 1);
  chat.lastSeq = seq;
  const p = ev.payload ?? {};
  if (ev.event_type === "turn_started") {
    item(ev.run_id).user.textContent = p.input ?? "";
  } else if (ev.event_type === "model_delta" || ev.event_type === "model_stream_restarted") {
    const entry = item(ev.run_id);
    chat.texts.feed(ev);
    if (!entry.messages.includes(p.message_id)) entry.messages.push(p.message_id);
    entry.answer.textContent = entry.messages.map((id) => chat.texts.text(id)).filter((t) => t).join("\n\n");
  } else if (["turn_completed", "turn_failed", "turn_cancelled"].includes(ev.event_type)) {
    const entry = item(ev.run_id);
    entry.answer.classList.remove("streaming");
    entry.answer.classList.add(ev.event_type.replace("turn_", ""));
    entry.answer.dataset.done = "true";
  }
  counters();
}

export function openChat(name) {
  if (chat.client) chat.client.close();
  Object.assign(chat, { texts: new MessageText(), lastSeq: null, gaps: 0 });
  chat.runs.clear();
  $("chat-log").replaceChildren();
  const client = new RoostClient(actorUrl(location, "chat", name), { cursor: 0 });
  chat.client = client;
  client.addEventListener("event", (e) => onEvent(e.detail.seq, e.detail.event));
  client.addEventListener("state", (e) => { chat.lastSeq = e.detail.seq; });
  client.addEventListener("welcome", (e) => {
    const w = e.detail.welcome;
    if (w.resume !== "replay") {
      if (chat.lastSeq !== null && w.cursor > chat.lastSeq) chat.gaps += w.cursor - chat.lastSeq;
      chat.lastSeq = w.cursor;
    }
    counters();
  });
  client.addEventListener("status", (e) => {
    $("chat-send").disabled = e.detail.status !== "open";
    counters();
  });
  client.start();
}

export function dropChat(seconds) {
  chat.client?.drop(seconds);
}

export function initChat() {
  $("chat").addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text || !chat.client) return;
    $("chat-input").value = "";
    try {
      await chat.client.call("send", [text]);
    } catch (err) {
      $("chat-error").textContent = `not sent: ${err.message}`;
    }
  });
}

// The demo page: one agent of kind "docs", its timeline, progress, approvals and connection.
import { RoostClient, actorUrl } from "./roost.js";
import { dropChat, initChat, openChat } from "./chat.js";

const $ = (id) => document.getElementById(id);
const KIND = "docs";

function sessionId() {
  let id = localStorage.getItem("roost.session");
  if (!id) {
    id = `web-${crypto.randomUUID().slice(0, 8)}`;
    localStorage.setItem("roost.session", id);
  }
  return id;
}

const view = {
  client: null,
  events: 0,
  gaps: 0,
  lastSeq: null, // the last seq this page processed (state or event)
  replayUntil: 0, // seqs up to this one arrived as a replay after a welcome
  currentTurn: null,
  bars: new Map(), // job_id -> <progress>
  decided: new Set(), // approval ids already granted or denied
};

function text(el, value) {
  el.textContent = value;
}

function setCounters() {
  const c = view.client;
  text($("n-events"), String(view.events));
  text($("n-cursor"), c && c.cursor !== null ? String(c.cursor) : "–");
  text($("n-reconnects"), String(c ? c.reconnects : 0));
  text($("n-duplicates"), String(c ? c.duplicates : 0));
  text($("n-gaps"), String(view.gaps));
}

function setStatus(status, detail = {}) {
  const badge = $("status");
  badge.className = `badge ${status}`;
  const labels = {
    idle: "not connected",
    connecting: "connecting…",
    open: "connected",
    reconnecting: "disconnected",
    closed: `closed${detail.code ? ` (${detail.code})` : ""}`,
  };
  text(badge, labels[status] ?? status);
  if (status === "reconnecting" && detail.attempt === 1) announce("Connection lost; reconnecting");
  if (status === "open" && view.client && view.client.reconnects > 0) announce("Reconnected");
  const indicator = $("reconnecting");
  indicator.hidden = status !== "reconnecting";
  if (status === "reconnecting") {
    const wait = detail.delay !== undefined ? ` in ${(detail.delay / 1000).toFixed(1)} s` : "";
    text(indicator, `reconnecting${wait} (attempt ${detail.attempt ?? 1})…`);
  }
  $("send").disabled = status !== "open";
}

function seen(seq) {
  if (view.lastSeq !== null && seq !== view.lastSeq + 1) view.gaps += Math.max(0, seq - view.lastSeq - 1);
  view.lastSeq = seq;
}

function describe(ev) {
  const p = ev.payload ?? {};
  switch (ev.event_type) {
    case "turn_started":
      return `“${p.input}”`;
    case "plan_ready":
      return (p.items ?? []).map((i) => `${i.step_index + 1}. ${i.tool}${i.approval_mode !== "safe_readonly" ? ` (${i.approval_mode})` : ""}`).join("  ");
    case "tool_started":
      return `${p.tool}${p.attempt > 1 ? ` · attempt ${p.attempt}` : ""}`;
    case "tool_progress":
      return `${p.tool} ${p.done}/${p.total} ${p.message ?? ""}`;
    case "tool_completed":
      return `${p.tool}: ${p.result?.summary ?? "done"}`;
    case "tool_failed":
    case "turn_failed":
    case "model_step_failed":
      return `${p.tool ?? ""} ${p.error ?? ""}${p.will_retry ? " · will retry" : ""}`;
    case "approval_requested":
      return `${p.tool} (${p.mode}) ${JSON.stringify(p.args)}`;
    case "approval_granted":
      return `${p.tool}${ev.status === "reused" ? " · covered by an earlier grant" : ""}`;
    case "verification_completed":
      return `${p.verification_result} · ${p.detail ?? ""}`;
    case "turn_completed":
      return p.output ?? "";
    case "run_queued":
      return `waiting for run ${p.behind_run_id}`;
    default:
      return ev.status ?? "";
  }
}

function announce(message, urgent = false) {
  // screen readers hear the moments that matter, not every progress tick
  text($(urgent ? "alert" : "announce"), message);
}

function addTimeline(seq, ev) {
  const li = document.createElement("li");
  li.className = `t-${ev.event_type}${seq <= view.replayUntil ? " replayed" : ""}`;
  li.dataset.seq = String(seq);
  li.dataset.type = ev.event_type;
  const s = document.createElement("span");
  s.className = "seq";
  text(s, String(seq));
  const t = document.createElement("span");
  t.className = "type";
  text(t, ev.event_type.replaceAll("_", " "));
  const d = document.createElement("span");
  text(d, describe(ev));
  li.append(s, t, d);
  $("timeline").append(li);
}

function progressBar(ev) {
  const p = ev.payload;
  let bar = view.bars.get(p.job_id);
  if (!bar) {
    const box = document.createElement("div");
    box.className = "job";
    const id = `job-${p.job_id}`;
    const label = document.createElement("label");
    label.htmlFor = id;
    bar = document.createElement("progress");
    bar.id = id;
    bar.dataset.tool = p.tool;
    box.append(label, bar);
    $("progress").append(box);
    view.bars.set(p.job_id, bar);
  }
  bar.max = p.total || 1;
  bar.value = p.done;
  text(bar.previousElementSibling, `${p.tool} — ${p.done}/${p.total}${p.message ? ` · ${p.message}` : ""}`);
}

function showApproval(ev) {
  const p = ev.payload;
  if (view.decided.has(p.approval_id) || document.querySelector(`[data-approval="${p.approval_id}"]`)) return;
  const card = document.createElement("div");
  card.className = "approval";
  card.dataset.approval = p.approval_id;
  const title = document.createElement("strong");
  text(title, `${p.tool} (${p.mode}) wants to run with`);
  const args = document.createElement("code");
  text(args, JSON.stringify(p.args, null, 2));
  const row = document.createElement("div");
  row.className = "row";
  const deny = document.createElement("button");
  deny.className = "deny";
  text(deny, "Deny");
  const approve = document.createElement("button");
  text(approve, "Approve");
  approve.setAttribute("aria-label", `Approve ${p.tool}`);
  deny.setAttribute("aria-label", `Deny ${p.tool}`);
  const decide = async (decision) => {
    approve.disabled = deny.disabled = true;
    try {
      await view.client.call("approve", [p.approval_id, decision]);
    } catch (err) {
      approve.disabled = deny.disabled = false;
      alert(`${decision} failed: ${err.message}`);
    }
  };
  approve.addEventListener("click", () => decide("grant"));
  deny.addEventListener("click", () => decide("deny"));
  row.append(deny, approve);
  card.append(title, args, row);
  $("approval-list").append(card);
  $("approvals").hidden = false;
  if (seqIsLive(ev)) {
    announce(`Approval needed: ${p.tool}`, true);
    if (!document.activeElement || document.activeElement === document.body) approve.focus();
  }
}

function seqIsLive(ev) {
  return !ev._replayed;
}

function settleApproval(id) {
  if (!id) return;
  view.decided.add(id);
  document.querySelector(`[data-approval="${id}"]`)?.remove();
  $("approvals").hidden = !$("approval-list").children.length;
}

function onEvent(seq, ev) {
  seen(seq);
  view.events += 1;
  addTimeline(seq, ev);
  const p = ev.payload ?? {};
  switch (ev.event_type) {
    case "turn_started":
      view.currentTurn = ev.turn_id;
      $("progress").replaceChildren(); // one turn's bars at a time
      view.bars.clear();
      text($("run-turn"), ev.turn_id);
      text($("run-status"), "started");
      text($("run-verification"), "–");
      text($("run-evidence"), "–");
      $("cancel").disabled = false;
      break;
    case "tool_progress":
      progressBar(ev);
      break;
    case "approval_requested":
      showApproval(ev);
      text($("run-status"), "awaiting approval");
      break;
    case "approval_granted":
    case "approval_denied":
      settleApproval(p.approval_id);
      break;
    case "verification_completed":
      text($("run-verification"), `${p.verification_result} (${p.verifier})`);
      text($("run-evidence"), (p.evidence_refs ?? []).join(" · ") || "–");
      break;
    case "turn_completed":
    case "turn_failed":
    case "turn_cancelled":
      if (!ev._replayed) announce(`Turn ${ev.event_type.replace("turn_", "")}`);
      if (ev.turn_id === view.currentTurn) {
        text($("run-status"), ev.event_type.replace("turn_", ""));
        $("cancel").disabled = true;
      }
      for (const card of document.querySelectorAll(".approval")) card.remove();
      $("approvals").hidden = true;
      break;
    default:
      if (ev.turn_id === view.currentTurn && ev.status) text($("run-status"), ev.status);
  }
  setCounters();
}

function open(name) {
  if (view.client) view.client.close();
  Object.assign(view, { events: 0, gaps: 0, lastSeq: null, replayUntil: 0, currentTurn: null });
  view.bars.clear();
  view.decided.clear();
  for (const id of ["timeline", "progress", "approval-list"]) $(id).replaceChildren();
  $("approvals").hidden = true;
  history.replaceState(null, "", `?agent=${encodeURIComponent(name)}`);
  // cursor 0: the page shows the agent's whole retained timeline, then live events
  const client = new RoostClient(actorUrl(location, KIND, name), { cursor: 0 });
  view.client = client;
  client.addEventListener("status", (e) => {
    setStatus(e.detail.status, e.detail);
    setCounters();
  });
  client.addEventListener("welcome", (e) => {
    const w = e.detail.welcome;
    if (w.resume !== "replay") {
      // the server had nothing to replay for us (fresh or snapshot): anything after our last seq
      // up to its cursor is lost to this page, and counted as a gap
      if (view.lastSeq !== null && w.cursor > view.lastSeq) view.gaps += w.cursor - view.lastSeq;
      view.lastSeq = w.cursor;
    }
    view.replayUntil = w.cursor;
    setCounters();
    client.call("session", [sessionId()]).then((card) => {
      if (card.active_turn && !view.currentTurn) view.currentTurn = card.active_turn.turn_id;
    }, () => {});
  });
  client.addEventListener("event", (e) => {
    const ev = e.detail.event;
    ev._replayed = e.detail.seq <= view.replayUntil;
    onEvent(e.detail.seq, ev);
  });
  client.addEventListener("state", (e) => {
    seen(e.detail.seq);
    setCounters();
  });
  client.start();
  openChat(name);
}

function init() {
  const params = new URLSearchParams(location.search);
  $("agent").value = params.get("agent") || $("agent").value;
  $("open").addEventListener("submit", (e) => {
    e.preventDefault();
    open($("agent").value.trim() || "demo");
  });
  $("ask").addEventListener("submit", async (e) => {
    e.preventDefault();
    const request = $("request").value.trim();
    if (!request || !view.client) return;
    $("send").disabled = true;
    try {
      const reply = await view.client.call("turn", [request, sessionId()]);
      view.currentTurn = reply.turn_id;
    } catch (err) {
      alert(`request failed: ${err.message}`);
    } finally {
      $("send").disabled = view.client.status !== "open";
    }
  });
  $("drop").addEventListener("click", () => {
    view.client?.drop(2);
    dropChat(2);
  });
  $("cancel").addEventListener("click", async () => {
    if (view.currentTurn) await view.client.call("cancel", [view.currentTurn]).catch(() => {});
  });
  initChat();
  open($("agent").value.trim() || "demo");
}

init();

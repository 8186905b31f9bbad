// Roost browser client: one actor, one WebSocket at a time, reconnected and resumed by itself.
// A plain ES module: no build step, no dependency. See docs/protocol.md for the wire protocol.
//
//   import { RoostClient } from "./roost.js";
//   const client = new RoostClient(actorUrl(location, "docs", "demo"));
//   client.addEventListener("event", (e) => console.log(e.detail.seq, e.detail.event));
//   client.start();
//   const reply = await client.call("turn", ["analyze the documents and make a report"]);
//
// Guarantees (the same as the Python client's, roost/client/client.py):
// - dedup by seq: a state/event frame is processed only if its seq is above the last processed one;
// - `state` never goes back: a replayed state older than the welcome's does not replace it;
// - every reconnect sends cursor=<last processed seq>, so the server replays what was missed;
// - a call ends once: with its result, an RpcError, a timeout, or ConnectionLost (never resent);
// - terminal closes (1000, 1009, 4400-4499) stop the client; any other close reconnects with
//   exponential backoff and full jitter.
//
// Events dispatched (CustomEvent, payload in `detail`): "welcome" {welcome}, "state" {state, seq},
// "event" {event, seq}, "message" {data}, "status" {status, attempt, delay}, "error" {frame},
// "closed" {code, reason}.

export const PROTOCOL = 1;

/** Close codes after which reconnecting cannot help (docs/protocol.md, *Close codes*). */
export function isTerminalClose(code) {
  return code === 1000 || code === 1009 || (code >= 4400 && code <= 4499);
}

/**
 * ws(s)://host{prefix}/agents/{kind}/{name} for the page's own origin. `prefix` is where the Roost app
 * is mounted ("/roost" for `api.mount("/roost", roost)`; "" at the root); it defaults to the path of
 * a page that Roost itself serves (its "/" or "/web/…"), so the demo page works under any mount.
 */
export function actorUrl(loc, kind, name, prefix = mountOf(loc.pathname)) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  const mount = String(prefix).replace(/\/+$/, "");
  return `${scheme}//${loc.host}${mount}/agents/${encodeURIComponent(kind)}/${encodeURIComponent(name)}`;
}

/** The mount prefix of a page Roost serves: its path up to the last "/", without a trailing "/web". */
export function mountOf(pathname) {
  const dir = String(pathname || "/").replace(/[^/]*$/, "").replace(/\/$/, "");
  return dir.endsWith("/web") ? dir.slice(0, -4) : dir;
}

export class RpcError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = "RpcError";
    this.code = code;
  }
}

export class ConnectionLost extends Error {
  constructor(message = "connection lost before the reply; the call may or may not have run") {
    super(message);
    this.name = "ConnectionLost";
  }
}

/** delay(attempt) = uniform(0, min(cap, base * 2^attempt)) seconds ("full jitter"). */
export function backoffDelay(attempt, { base = 0.25, cap = 5 } = {}, random = Math.random) {
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return random() * ceiling;
}

export class RoostClient extends EventTarget {
  constructor(url, { cursor = null, backoff = {}, random = Math.random, WebSocketImpl = WebSocket } = {}) {
    super();
    this.url = url;
    this.cursor = cursor; // the last processed seq, sent on every reconnect
    this.state = null;
    this.stateSeq = null; // the seq of the state held (a replayed older state never replaces it)
    this.status = "idle"; // idle | connecting | open | reconnecting | closed
    this.reconnects = 0;
    this.duplicates = 0; // state/event frames received again, dropped
    this.welcomes = 0;
    this.lastWelcome = null;
    this._backoff = backoff;
    this._random = random;
    this._WebSocket = WebSocketImpl;
    this._ws = null;
    this._ids = 0;
    this._pending = new Map(); // id -> {resolve, reject, timer}
    this._attempt = 0;
    this._timer = null;
    this._awayUntil = 0;
    this._stopped = false;
  }

  start() {
    if (this._ws === null && !this._stopped) this._connect();
    return this;
  }

  /** Close for good (code 1000) and fail pending calls. */
  close() {
    this._stopped = true;
    clearTimeout(this._timer);
    if (this._ws) this._ws.close(1000, "client closed");
    this._failPending(new ConnectionLost("client closed"));
    this._setStatus("closed");
  }

  /** Drop the socket as a network failure would; reconnect no sooner than `awaySeconds` from now. */
  drop(awaySeconds = 0) {
    if (!this._ws) return false;
    this._awayUntil = Date.now() + awaySeconds * 1000;
    this._ws.close(3000, "dropped by the client");
    return true;
  }

  /** Call a @callable method; resolves with its result after the server committed it. */
  call(method, args = [], kwargs = {}, { timeout = 15000 } = {}) {
    if (this.status !== "open") return Promise.reject(new ConnectionLost("not connected"));
    const id = String(++this._ids);
    const frame = { type: "rpc", id, method, args, kwargs };
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new Error(`call ${method} timed out after ${timeout} ms`));
      }, timeout);
      this._pending.set(id, { resolve, reject, timer });
      this._ws.send(JSON.stringify(frame));
    });
  }

  // -- internals ------------------------------------------------------------------------------

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _setStatus(status, extra = {}) {
    this.status = status;
    this._emit("status", { status, ...extra });
  }

  _connect() {
    const url = new URL(this.url);
    if (this.cursor !== null) url.searchParams.set("cursor", String(this.cursor));
    this._setStatus(this.welcomes ? "reconnecting" : "connecting", { attempt: this._attempt });
    const ws = new this._WebSocket(url.toString());
    this._ws = ws;
    ws.onmessage = (msg) => this._onFrame(msg.data);
    ws.onclose = (ev) => this._onClose(ws, ev.code, ev.reason);
    ws.onerror = () => {}; // a close always follows
  }

  _onClose(ws, code, reason) {
    if (ws !== this._ws) return;
    this._ws = null;
    this._failPending(new ConnectionLost());
    this._emit("closed", { code, reason });
    if (this._stopped) return;
    if (isTerminalClose(code)) {
      this._stopped = true;
      this._setStatus("closed", { code, reason });
      return;
    }
    const delay = Math.max(
      backoffDelay(this._attempt, this._backoff, this._random) * 1000,
      this._awayUntil - Date.now(),
    );
    this._attempt += 1;
    this._setStatus("reconnecting", { attempt: this._attempt, delay: Math.round(delay), code });
    this._timer = setTimeout(() => this._connect(), delay);
  }

  _failPending(error) {
    for (const { reject, timer } of this._pending.values()) {
      clearTimeout(timer);
      reject(error);
    }
    this._pending.clear();
  }

  _onFrame(raw) {
    let frame;
    try {
      frame = JSON.parse(raw);
    } catch {
      return;
    }
    switch (frame.type) {
      case "welcome":
        return this._onWelcome(frame);
      case "state":
      case "event":
        if (this.cursor !== null && frame.seq <= this.cursor) {
          this.duplicates += 1;
          return;
        }
        this.cursor = frame.seq;
        if (frame.type === "state") {
          if (this.stateSeq === null || frame.seq > this.stateSeq) {
            this.state = frame.state;
            this.stateSeq = frame.seq;
          }
          this._emit("state", { state: frame.state, seq: frame.seq });
        } else {
          this._emit("event", { event: frame.event, seq: frame.seq });
        }
        return;
      case "message":
        return this._emit("message", { data: frame.data });
      case "rpc_result": {
        const pending = this._pending.get(frame.id);
        if (!pending) return;
        this._pending.delete(frame.id);
        clearTimeout(pending.timer);
        if (frame.ok) pending.resolve(frame.result);
        else pending.reject(new RpcError(frame.error.code, frame.error.message));
        return;
      }
      case "error":
        return this._emit("error", { frame });
      default:
        return;
    }
  }

  _onWelcome(welcome) {
    this.welcomes += 1;
    if (this.welcomes > 1) this.reconnects += 1;
    this._attempt = 0;
    this.lastWelcome = welcome;
    if (welcome.resume !== "replay" || this.cursor === null) {
      // fresh or snapshot: nothing between our cursor and the server's is available (or the data
      // went back in time); take the welcome's state and cursor as they are
      this.cursor = welcome.cursor;
    }
    this.state = welcome.state;
    this.stateSeq = welcome.cursor;
    this._setStatus("open");
    this._emit("welcome", { welcome });
  }
}

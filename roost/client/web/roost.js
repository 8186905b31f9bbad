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
// - a call ends once: with its result, an RpcError, CallNotSent/SendTimeout (never sent: no
//   effect), or ConnectionLost/ReplyTimeout (sent, the outcome unknown: OutcomeUnknown);
// - every call carries a fresh idempotency key unless `{ idempotencyKey: false }` (the server runs a
//   key's call at most once and answers its recorded outcome: docs/protocol.md, *Idempotency keys*);
//   a call made while not connected waits for the connection (at most `maxQueued`; past it
//   CallNotSent at once), and a keyed call whose connection dropped after it was sent is sent again
//   on the next one with the same key, up to `resends` times within its timeout;
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
 * ws(s)://host{prefix}/agents/{kind}/{name}. `loc` is where the Roost app is reached: the page's
 * `location`, a `URL`, or a string ("http://127.0.0.1:8000", "https://example.com/roost/"); an
 * https: or wss: address gives wss:. `prefix` is where the Roost app is mounted ("/roost" for
 * `api.mount("/roost", roost)`, with or without its slashes; "" at the root); it defaults to the
 * path of a page that Roost itself serves (its "/" or "/web/…"), so the demo page works under any
 * mount, and to the path of a URL given as `loc` (up to its last "/").
 */
export function actorUrl(loc, kind, name, prefix = undefined) {
  const at = typeof loc === "string" ? new URL(loc) : loc;
  const scheme = at.protocol === "https:" || at.protocol === "wss:" ? "wss:" : "ws:";
  const given = prefix === undefined || prefix === null ? mountOf(at.pathname) : String(prefix);
  const mount = given.replace(/^\/*/, "/").replace(/\/+$/, "");
  return `${scheme}//${at.host}${mount}/agents/${encodeURIComponent(kind)}/${encodeURIComponent(name)}`;
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

/** The call was never sent: it had no effect, retrying it is safe. */
export class CallNotSent extends Error {
  constructor(message = "the call was not sent") {
    super(message);
    this.name = "CallNotSent";
  }
}

/** No connection came within the call's timeout: never sent. */
export class SendTimeout extends CallNotSent {
  constructor(message) {
    super(message);
    this.name = "SendTimeout";
  }
}

/** The call was sent and no answer came: it may or may not have run. With its `idempotencyKey`,
 * calling again with the same key (`{ idempotencyKey: err.idempotencyKey }`) is safe. */
export class OutcomeUnknown extends Error {
  constructor(message = "the call was sent; its outcome is unknown", idempotencyKey = null) {
    super(message);
    this.name = "OutcomeUnknown";
    this.idempotencyKey = idempotencyKey;
  }
}

export class ConnectionLost extends OutcomeUnknown {
  constructor(message = "connection lost before the reply; the call may or may not have run", key = null) {
    super(message, key);
    this.name = "ConnectionLost";
  }
}

/** The call was sent and no reply came within its timeout. */
export class ReplyTimeout extends OutcomeUnknown {
  constructor(message, key = null) {
    super(message, key);
    this.name = "ReplyTimeout";
  }
}

/** A fresh idempotency key: 32 random hex digits (crypto.getRandomValues works on plain http too). */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** delay(attempt) = uniform(0, min(cap, base * 2^attempt)) seconds ("full jitter"). */
export function backoffDelay(attempt, { base = 0.25, cap = 5 } = {}, random = Math.random) {
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return random() * ceiling;
}

export class RoostClient extends EventTarget {
  constructor(
    url,
    {
      cursor = null,
      backoff = {},
      random = Math.random,
      WebSocketImpl = WebSocket,
      maxQueued = 1000,
      resends = 3,
    } = {},
  ) {
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
    this._pending = new Map(); // id -> the sent call: {frame, key, sent, resends, resolve, reject, timer}
    this._queue = []; // calls waiting for a connection, in order
    this._maxQueued = maxQueued;
    this._resends = resends;
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
    this._failAll("client closed");
    this._setStatus("closed");
  }

  /** Drop the socket as a network failure would; reconnect no sooner than `awaySeconds` from now. */
  drop(awaySeconds = 0) {
    if (!this._ws) return false;
    this._awayUntil = Date.now() + awaySeconds * 1000;
    this._ws.close(3000, "dropped by the client");
    return true;
  }

  /**
   * Call a @callable method; resolves with its result after the server committed it. Not connected:
   * the call waits for the connection (see the guarantees above). `idempotencyKey`: true (a fresh
   * key), false (none: never sent again), or the key to use (1 to 128 characters).
   */
  call(method, args = [], kwargs = {}, { timeout = 15000, idempotencyKey = true } = {}) {
    const key = idempotencyKey === true ? newKey() : idempotencyKey === false ? null : String(idempotencyKey);
    const frame = { type: "rpc", method, args, kwargs };
    if (key !== null) frame.idempotency_key = key;
    if (this._stopped) return Promise.reject(new CallNotSent("the client is closed"));
    if (this.status !== "open" && this._queue.length >= this._maxQueued) {
      return Promise.reject(new CallNotSent(`${this._queue.length} calls already wait for a connection`));
    }
    return new Promise((resolve, reject) => {
      const call = { id: null, frame, key, sent: false, resends: 0, resolve, reject, timer: null };
      call.timer = setTimeout(() => {
        this._pending.delete(call.id);
        this._queue = this._queue.filter((c) => c !== call);
        if (call.sent) reject(new ReplyTimeout(`call ${method}: no reply within ${timeout} ms`, key));
        else reject(new SendTimeout(`call ${method}: not sent within ${timeout} ms (no connection)`));
      }, timeout);
      if (this.status === "open") this._send(call);
      else this._queue.push(call);
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

  _send(call) {
    call.id = String(++this._ids);
    this._pending.set(call.id, call);
    this._ws.send(JSON.stringify({ ...call.frame, id: call.id }));
    call.sent = true;
  }

  _onClose(ws, code, reason) {
    if (ws !== this._ws) return;
    this._ws = null;
    // calls made from here on wait for the next connection; a client closed by close() stays closed
    if (!this._stopped) this.status = "reconnecting";
    const resend = [];
    for (const call of this._pending.values()) {
      if (call.key !== null && call.resends < this._resends && !this._stopped && !isTerminalClose(code)) {
        call.resends += 1;
        resend.push(call); // sent again, with its key, on the next connection
      } else {
        clearTimeout(call.timer);
        call.reject(new ConnectionLost(undefined, call.key));
      }
    }
    this._pending.clear();
    this._queue = resend.concat(this._queue);
    this._emit("closed", { code, reason });
    if (this._stopped) return;
    if (isTerminalClose(code)) {
      this._stopped = true;
      this._failAll(`closed by the server (${code})`);
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

  /** The client stopped: sent calls end with ConnectionLost, waiting ones with CallNotSent. */
  _failAll(why) {
    for (const call of this._pending.values()) {
      clearTimeout(call.timer);
      call.reject(new ConnectionLost(`${why} before the reply`, call.key));
    }
    this._pending.clear();
    for (const call of this._queue) {
      clearTimeout(call.timer);
      call.reject(new CallNotSent(`${why}: not sent`));
    }
    this._queue = [];
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
    const waiting = this._queue;
    this._queue = [];
    for (const call of waiting) this._send(call);
  }
}

/**
 * Streamed model output, reassembled (docs/protocol.md, *Streamed model output*): feed it every
 * event; `feed` returns the text a `model_delta` adds. Offsets count Unicode code points, as the
 * server does: each character is appended once, a delta beyond what is held is a gap (counted, not
 * appended), `model_stream_restarted` empties the message. The same rules as roost.client.MessageText.
 */
export class MessageText {
  constructor() {
    this.texts = new Map(); // message_id -> text
    this.lengths = new Map(); // message_id -> code points held
    this.gaps = 0;
    this.duplicates = 0;
  }

  feed(ev) {
    const p = (ev && ev.payload) || {};
    const id = p.message_id;
    if (typeof id !== "string") return "";
    if (ev.event_type === "model_stream_restarted") {
      this.texts.set(id, "");
      this.lengths.set(id, 0);
      return "";
    }
    if (ev.event_type !== "model_delta" || !Number.isInteger(p.offset) || typeof p.text !== "string") return "";
    const held = this.lengths.get(id) ?? 0;
    if (p.offset > held) {
      this.gaps += 1;
      return "";
    }
    let points = Array.from(p.text);
    if (p.offset < held) {
      this.duplicates += 1;
      points = points.slice(held - p.offset);
    }
    const added = points.join("");
    this.texts.set(id, (this.texts.get(id) ?? "") + added);
    this.lengths.set(id, held + points.length);
    return added;
  }

  text(id) {
    return this.texts.get(id) ?? "";
  }
}

// Roost browser client: one actor, one WebSocket at a time, reconnected and resumed by itself.
// A plain ES module: no build step, no dependency. See docs/protocol.md for the wire protocol.
//
//   import { RoostClient } from "./roost.js";
//   const client = new RoostClient(actorUrl(location, "docs", "demo"));
//   client.addEventListener("event", (e) => console.log(e.detail.seq, e.detail.event));
//   client.start();
//   const reply = await client.call("turn", ["analyze the documents and make a report"]);
//   for await (const chunk of client.stream("count_to", [3])) console.log(chunk); // a streaming method
//
// Guarantees (the same as the Python client's, roost/client/client.py):
// - dedup by seq: a state/event frame is processed only if its seq is above the last processed one;
// - `state` never goes back: a replayed state older than the welcome's does not replace it;
// - every reconnect sends cursor=<last processed seq>, so the server replays what was missed;
// - a call ends once: with its result, an RpcError, CallNotSent/SendTimeout (never sent: no
//   effect), or ConnectionLost/ReplyTimeout (sent, the outcome unknown: OutcomeUnknown);
// - every call carries a fresh idempotency key unless `{ idempotencyKey: false }` (the server runs a
//   key's call at most once and answers its recorded outcome: docs/protocol.md, *Idempotency keys*);
//   a streaming call (`stream`, or `call` with `onChunk`) carries none, as the server requires: it
//   is never sent again, and it gets every chunk in order, then its result; its timeout bounds the
//   wait for each item (the send, every chunk, the result), as the Python client's `stream`;
// - a call refused as a bad frame (its `args` not an array, say) fails at once with an RpcError
//   `bad_frame`: the server's `error` frame names the call's id;
//   a call made while not connected waits for the connection (at most `maxQueued`; past it
//   CallNotSent at once), and a keyed call whose connection dropped after it was sent is sent again
//   on the next one with the same key, up to `resends` times within its timeout;
// - terminal closes (1000, 1009, 4400-4499) stop the client; any other close reconnects with
//   exponential backoff and full jitter; so does an `error` event with no close after it (Node's
//   WebSocket on a refused connection), taken as an abnormal close (1006).
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
   * key), false (none: never sent again), or the key to use (1 to 128 characters). `onChunk`: call a
   * streaming method, each chunk passed to it in order (one that throws ends the call with its
   * error); such a call takes no key (giving one is a TypeError) and `timeout` bounds each item.
   */
  call(method, args = [], kwargs = {}, options = {}) {
    return this._call(method, args, kwargs, options).promise;
  }

  /**
   * Call a streaming method: `for await (const chunk of client.stream(method, args, kwargs))` gets its
   * chunks in order; once the loop ends the result is in `.result` (and `.done` is true); a failure
   * is thrown from the loop, as `call`'s. Sent on the first iteration, with no idempotency key;
   * `timeout` bounds the wait for each item. Leaving the loop early forgets the call (the server
   * still runs it). The Python client's `stream`.
   */
  stream(method, args = [], kwargs = {}, { timeout = 15000 } = {}) {
    return new CallStream((onChunk) => this._call(method, args, kwargs, { timeout, onChunk }), this);
  }

  // -- internals ------------------------------------------------------------------------------

  /** A call: its promise, and the call itself (for a stream to forget it). */
  _call(method, args, kwargs, { timeout = 15000, idempotencyKey, onChunk } = {}) {
    const streaming = onChunk !== undefined && onChunk !== null;
    if (streaming && typeof onChunk !== "function") {
      return { promise: Promise.reject(new TypeError("onChunk must be a function")), call: null };
    }
    if (streaming && idempotencyKey !== undefined && idempotencyKey !== false) {
      return { promise: Promise.reject(new TypeError("a streaming call takes no idempotency key")), call: null };
    }
    const asked = idempotencyKey === undefined ? !streaming : idempotencyKey;
    const key = asked === true ? newKey() : asked === false ? null : String(asked);
    const frame = { type: "rpc", method, args, kwargs };
    if (key !== null) frame.idempotency_key = key;
    if (this._stopped) return { promise: Promise.reject(new CallNotSent("the client is closed")), call: null };
    if (this.status !== "open" && this._queue.length >= this._maxQueued) {
      const full = new CallNotSent(`${this._queue.length} calls already wait for a connection`);
      return { promise: Promise.reject(full), call: null };
    }
    const call = { id: null, frame, key, sent: false, resends: 0, resolve: null, reject: null, timer: null };
    call.onChunk = streaming ? onChunk : null;
    const promise = new Promise((resolve, reject) => {
      call.resolve = resolve;
      call.reject = reject;
      // for a stream, armed again at every chunk: the timeout bounds the wait for each item
      call.arm = () => {
        clearTimeout(call.timer);
        call.timer = setTimeout(() => {
          this._forget(call);
          const what = streaming ? "no stream item" : "no reply";
          if (call.sent) reject(new ReplyTimeout(`call ${method}: ${what} within ${timeout} ms`, key));
          else reject(new SendTimeout(`call ${method}: not sent within ${timeout} ms (no connection)`));
        }, timeout);
      };
      call.arm();
      if (this.status === "open") this._send(call);
      else this._queue.push(call);
    });
    return { promise, call };
  }

  /** Forget a call: no answer to it is waited for any more. */
  _forget(call) {
    clearTimeout(call.timer);
    if (call.id !== null && this._pending.get(call.id) === call) this._pending.delete(call.id);
    this._queue = this._queue.filter((c) => c !== call);
  }

  _chunk(frame) {
    const pending = this._pending.get(frame.id);
    if (!pending || pending.onChunk === null) return; // not a stream: its chunks are not asked for
    pending.arm();
    try {
      pending.onChunk(frame.chunk);
    } catch (err) {
      this._forget(pending);
      pending.reject(err);
    }
  }

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
    // A browser follows an error with a close (1006); Node's WebSocket (undici) does not when the
    // connection is refused: the socket stays CONNECTING and no close ever comes. So an error ends
    // the connection here, as an abnormal close; the close that may follow finds it ended already.
    ws.onerror = () => this._onError(ws);
  }

  _onError(ws) {
    if (ws !== this._ws) return;
    this._onClose(ws, 1006, "connection failed");
    try {
      ws.close(); // ends a connection attempt still under way (Node's may fire its error again)
    } catch {
      // closed already
    }
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
      case "rpc_chunk":
        return this._chunk(frame);
      case "error": {
        const pending = typeof frame.id === "string" ? this._pending.get(frame.id) : undefined;
        if (pending) {
          this._forget(pending);
          pending.reject(new RpcError(frame.code, frame.message));
        }
        return this._emit("error", { frame });
      }
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
 * The chunks of one streaming call, as an async iterator (`RoostClient.stream`): every chunk in
 * order, then `done` is true and `result` holds the call's result; a failure is thrown.
 */
export class CallStream {
  constructor(open, client = null) {
    this._open = open; // onChunk -> {promise, call}
    this._client = client;
    this._call = null;
    this._items = []; // what came and was not taken yet: {chunk} | {result} | {error}
    this._waiting = null; // the resolver of the next() waiting for an item
    this._opened = false;
    this.done = false;
    this.result = null;
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    if (this.done) return { done: true, value: undefined };
    if (!this._opened) {
      this._opened = true;
      const { promise, call } = this._open((chunk) => this._put({ chunk }));
      this._call = call;
      promise.then(
        (result) => this._put({ result }),
        (error) => this._put({ error }),
      );
    }
    const item = this._items.length ? this._items.shift() : await new Promise((r) => (this._waiting = r));
    if ("chunk" in item) return { done: false, value: item.chunk };
    this.done = true;
    if ("error" in item) throw item.error;
    this.result = item.result;
    return { done: true, value: undefined };
  }

  /** Leaving the loop early: the call is forgotten (the server still runs it). */
  async return() {
    if (!this.done && this._call !== null && this._client !== null) this._client._forget(this._call);
    this.done = true;
    return { done: true, value: undefined };
  }

  _put(item) {
    if (this.done) return;
    const waiting = this._waiting;
    this._waiting = null;
    if (waiting) waiting(item);
    else this._items.push(item);
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

// Types for roost.js and for the frames of Roost's wire protocol, version 1 (docs/protocol.md).
// Hand-written beside the sources: roost.js is shipped as it is, with no build step. They use the DOM
// library's WebSocket, EventTarget and CustomEvent (Node 22 has all three): a Node project's tsconfig
// lists "DOM" in "lib".

/** Any JSON value: what states, events, messages, arguments and results are. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** An actor's address: its kind and its name. */
export interface ActorRef {
  kind: string;
  name: string;
}

/** A call's error, as the server sends it (`rpc_result` with `ok: false`, `auth_result`). */
export interface ErrorBody {
  code: string;
  message: string;
}

// -- server frames (docs/protocol.md, *Server frames*) ---------------------------------------

/** Always the first frame of a connection. */
export interface WelcomeFrame {
  type: "welcome";
  protocol: 1;
  connection_id: string;
  actor: ActorRef;
  /** The state at `cursor`. */
  state: Json;
  /** The seq of the newest logged frame (0 for an actor that never logged anything). */
  cursor: number;
  resume: "fresh" | "replay" | "snapshot";
  /** The oldest seq still retained (`cursor + 1` when the log is empty). */
  oldest: number;
  reason?: string;
}

/** The actor's state changed (durable, logged). */
export interface StateFrame {
  type: "state";
  seq: number;
  state: Json;
}

/** The actor emitted a durable event (logged). */
export interface EventFrame {
  type: "event";
  seq: number;
  event: Json;
}

/** An ephemeral broadcast from the actor (not logged, no seq). */
export interface ServerMessageFrame {
  type: "message";
  data: Json;
}

/** One item of a streaming call, before its result. */
export interface RpcChunkFrame {
  type: "rpc_chunk";
  id: string;
  chunk: Json;
}

export interface RpcOkFrame {
  type: "rpc_result";
  id: string;
  ok: true;
  result: Json;
}

export interface RpcErrorFrame {
  type: "rpc_result";
  id: string;
  ok: false;
  error: ErrorBody;
}

/** A call's outcome: its result or its error. */
export type RpcResultFrame = RpcOkFrame | RpcErrorFrame;

/** An error not tied to a call (a bad frame, an unknown type). */
export interface ErrorFrame {
  type: "error";
  code: string;
  message: string;
  /** The id of an `rpc` frame refused as a bad frame although its id was good: that call failed. */
  id?: string;
}

/** The answer to a `ping`, with its id. */
export interface PongFrame {
  type: "pong";
  id: number | string | null;
}

/** An `auth` frame's token was accepted: the connection runs on it until `exp` (null: no expiry). */
export interface AuthOkFrame {
  type: "auth_result";
  id: number | string | null;
  ok: true;
  exp: number | null;
}

/** An `auth` frame's token was refused (`unauthenticated`) or the frame dropped (`rate_limited`). */
export interface AuthErrorFrame {
  type: "auth_result";
  id: number | string | null;
  ok: false;
  error: ErrorBody;
}

export type AuthResultFrame = AuthOkFrame | AuthErrorFrame;

/** Every frame the server sends, told apart by `type` (and `ok`). */
export type ServerFrame =
  | WelcomeFrame
  | StateFrame
  | EventFrame
  | ServerMessageFrame
  | RpcChunkFrame
  | RpcResultFrame
  | ErrorFrame
  | PongFrame
  | AuthResultFrame;

// -- client frames (docs/protocol.md, *Client frames*) ---------------------------------------

/** Call a `@callable` method. `id`: 1 to 128 characters, echoed in the reply. */
export interface RpcFrame {
  type: "rpc";
  id: string;
  method: string;
  args?: Json[];
  kwargs?: { [key: string]: Json };
  /** 1 to 128 characters, or null (none): names the logical call across reconnects and restarts. */
  idempotency_key?: string | null;
}

/** Delivered to the actor's `on_message(connection, data)`. */
export interface ClientMessageFrame {
  type: "message";
  data: Json;
}

/** Which broadcast frames this connection receives (omitted fields keep their value). */
export interface SubscribeFrame {
  type: "subscribe";
  state?: boolean;
  events?: boolean;
  messages?: boolean;
}

/** Answered with `pong`, after the replies to everything sent before it. */
export interface PingFrame {
  type: "ping";
  id?: number | string | null;
}

/** Go on with a new token before the current one expires; answered with `auth_result`. */
export interface AuthFrame {
  type: "auth";
  token: string;
  id?: number | string | null;
}

/** Every frame a client sends, told apart by `type`. */
export type ClientFrame = RpcFrame | ClientMessageFrame | SubscribeFrame | PingFrame | AuthFrame;

// -- roost.js ---------------------------------------------------------------------------------

export const PROTOCOL: 1;

/** Close codes after which reconnecting cannot help: 1000, 1009, 4400-4499. */
export function isTerminalClose(code: number): boolean;

/** Where a Roost app is reached: a page's `location`, a `URL`, or a string such as "http://host:8000". */
export type Base = string | { protocol: string; host: string; pathname: string };

/**
 * ws(s)://host{prefix}/agents/{kind}/{name}. `prefix`: where the Roost app is mounted ("/roost";
 * "" at the root); by default the path of `base` up to its last "/" (without a trailing "/web").
 */
export function actorUrl(base: Base, kind: string, name: string, prefix?: string | null): string;

/** The mount prefix of a page Roost serves: its path up to the last "/", without a trailing "/web". */
export function mountOf(pathname: string): string;

/** The call reached the actor and failed: `code` is the protocol's error code. */
export class RpcError extends Error {
  constructor(code: string, message: string);
  readonly code: string;
}

/** The call was never sent: it had no effect, retrying it is safe. */
export class CallNotSent extends Error {
  constructor(message?: string);
}

/** No connection came within the call's timeout: never sent. */
export class SendTimeout extends CallNotSent {}

/** The call was sent and no answer came: it may or may not have run. */
export class OutcomeUnknown extends Error {
  constructor(message?: string, idempotencyKey?: string | null);
  /** Call again with `{ idempotencyKey }` to learn the outcome safely. */
  readonly idempotencyKey: string | null;
}

export class ConnectionLost extends OutcomeUnknown {}

/** The call was sent and no reply came within its timeout. */
export class ReplyTimeout extends OutcomeUnknown {}

/** A fresh idempotency key: 32 random hex digits. */
export function newKey(): string;

export interface Backoff {
  /** Seconds; default 0.25. */
  base?: number;
  /** Seconds; default 5. */
  cap?: number;
}

/** uniform(0, min(cap, base * 2^attempt)) seconds ("full jitter"). */
export function backoffDelay(attempt: number, backoff?: Backoff, random?: () => number): number;

/** The WebSocket constructor the client uses (the global one by default). */
export type WebSocketConstructor = new (url: string) => WebSocket;

export interface RoostClientOptions {
  /** The last processed seq: the server replays what came after it. */
  cursor?: number | null;
  backoff?: Backoff;
  random?: () => number;
  WebSocketImpl?: WebSocketConstructor;
  /** Calls that may wait for a connection; past it, CallNotSent at once. Default 1000. */
  maxQueued?: number;
  /** How many times a keyed call is sent again after its connection dropped. Default 3. */
  resends?: number;
}

export interface CallOptions {
  /** Milliseconds; default 15000. */
  timeout?: number;
  /** true: a fresh key (the default); false: none (never sent again); a string: that key. */
  idempotencyKey?: boolean | string;
  /** Not a streaming call (see StreamingCallOptions). */
  onChunk?: undefined;
}

/** A call of a streaming method: its chunks go to `onChunk`, in order; it resolves with the result. */
export interface StreamingCallOptions<C = Json> {
  /** Milliseconds to wait for each item (the send, every chunk, the result); default 15000. */
  timeout?: number;
  /** Each chunk, in order; one that throws ends the call with its error. */
  onChunk: (chunk: C) => void;
  /** A streaming call takes no idempotency key (it is never sent again). */
  idempotencyKey?: false;
}

export interface StreamOptions {
  /** Milliseconds to wait for each item (the send, every chunk, the result); default 15000. */
  timeout?: number;
}

/** The chunks of one streaming call (`RoostClient.stream`): `for await (const chunk of stream)`. */
export class CallStream<C = Json, T = Json> implements AsyncIterableIterator<C> {
  /** The loop ended: every chunk came, and `result` holds the call's result (or it failed). */
  readonly done: boolean;
  /** The call's result, once `done` (null before). */
  readonly result: T | null;
  next(): Promise<IteratorResult<C, undefined>>;
  /** Leaving the loop early: the call is forgotten (the server still runs it). */
  return(): Promise<IteratorResult<C, undefined>>;
  [Symbol.asyncIterator](): CallStream<C, T>;
}

export type ClientStatus = "idle" | "connecting" | "open" | "reconnecting" | "closed";

/** The `detail` of each event a RoostClient dispatches. */
export interface RoostClientEventMap {
  welcome: { welcome: WelcomeFrame };
  state: { state: Json; seq: number };
  event: { event: Json; seq: number };
  message: { data: Json };
  status: { status: ClientStatus; attempt?: number; delay?: number; code?: number; reason?: string };
  error: { frame: ErrorFrame };
  closed: { code: number; reason: string };
}

export type RoostClientEvent<K extends keyof RoostClientEventMap> = CustomEvent<RoostClientEventMap[K]>;

/** One actor, one WebSocket at a time, reconnected and resumed by itself (see roost.js). */
export class RoostClient extends EventTarget {
  constructor(url: string, options?: RoostClientOptions);
  readonly url: string;
  /** The last processed seq, sent on every reconnect. */
  cursor: number | null;
  /** The actor's state as of `stateSeq` (null before the first welcome). */
  state: Json | null;
  stateSeq: number | null;
  status: ClientStatus;
  reconnects: number;
  /** State and event frames received again, dropped. */
  duplicates: number;
  welcomes: number;
  lastWelcome: WelcomeFrame | null;

  start(): this;
  /** Close for good (code 1000) and fail pending calls. */
  close(): void;
  /** Drop the socket as a network failure would; reconnect no sooner than `awaySeconds` from now. */
  drop(awaySeconds?: number): boolean;
  /** Call a `@callable` method; resolves with its result after the server committed it. With
   * `onChunk`, a streaming method: each chunk goes to it, in order, and no idempotency key is sent. */
  call<T = Json>(
    method: string,
    args?: Json[],
    kwargs?: { [key: string]: Json },
    options?: CallOptions,
  ): Promise<T>;
  call<T = Json, C = Json>(
    method: string,
    args: Json[],
    kwargs: { [key: string]: Json },
    options: StreamingCallOptions<C>,
  ): Promise<T>;
  /** Call a streaming method: its chunks as an async iterator, then its result in `result`. */
  stream<C = Json, T = Json>(
    method: string,
    args?: Json[],
    kwargs?: { [key: string]: Json },
    options?: StreamOptions,
  ): CallStream<C, T>;

  addEventListener<K extends keyof RoostClientEventMap>(
    type: K,
    listener: (event: RoostClientEvent<K>) => void,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  removeEventListener<K extends keyof RoostClientEventMap>(
    type: K,
    listener: (event: RoostClientEvent<K>) => void,
    options?: boolean | EventListenerOptions,
  ): void;
  removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void;
}

/** Streamed model output, reassembled (docs/protocol.md, *Streamed model output*). */
export class MessageText {
  readonly texts: Map<string, string>;
  readonly lengths: Map<string, number>;
  gaps: number;
  duplicates: number;
  /** Feed every event (`{event_type, payload: {message_id, offset, text}}`); returns the text a
   * `model_delta` adds ("" for any other event). */
  feed(event: unknown): string;
  text(messageId: string): string;
}

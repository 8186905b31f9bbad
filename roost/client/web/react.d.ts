// Types for react.js: useRoost, one actor in a React component.

import type {
  Base,
  CallOptions,
  ClientStatus,
  Json,
  RoostClient,
  RoostClientOptions,
  StreamingCallOptions,
} from "./roost.js";

/** The newest events a hook keeps unless told otherwise (100). */
export const MAX_EVENTS: number;

export interface UseRoostOptions extends RoostClientOptions {
  /** The actor's whole address (ws://…/agents/kind/name): kind, name, base and prefix are then unused. */
  url?: string;
  /** Where Roost is reached ("http://127.0.0.1:8000", a URL); default the page's `location`. */
  base?: Base;
  /** Where the Roost app is mounted ("/roost"); default "" (the root of `base`). */
  prefix?: string;
  /** How many of the newest durable events `events` holds; default 100. */
  maxEvents?: number;
}

/** A durable event as received, with its seq. */
export interface ReceivedEvent<E = Json> {
  seq: number;
  event: E;
}

export interface UseRoost<S = Json, E = Json> {
  /** The actor's state (null until the first welcome). */
  state: S | null;
  /** Call a `@callable` method (RoostClient.call) on the current client; the same function while the
   * address stays, usable from the component's effects at mount (the call waits for the connection).
   * With `onChunk` in the options, a streaming method (its chunks to it, no idempotency key). */
  call: <T = Json, C = Json>(
    method: string,
    args?: Json[],
    kwargs?: { [key: string]: Json },
    options?: CallOptions | StreamingCallOptions<C>,
  ) => Promise<T>;
  /** The newest `maxEvents` durable events received, oldest first. */
  events: ReadonlyArray<ReceivedEvent<E>>;
  /** The connection: connecting | open | reconnecting | closed. */
  status: ClientStatus;
  /** The client under the hook (null before the first effect ran). */
  client: RoostClient | null;
}

/** The address `useRoost` connects to for these arguments. */
export function hookUrl(
  kind: string,
  name: string,
  options?: Pick<UseRoostOptions, "url" | "base" | "prefix">,
): string;

/** One actor in a React component: its state, its events, the connection's status and `call`. */
export function useRoost<S = Json, E = Json>(kind: string, name: string, options?: UseRoostOptions): UseRoost<S, E>;

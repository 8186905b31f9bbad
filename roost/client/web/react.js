// useRoost: one actor in a React component, on a RoostClient (./roost.js). A plain ES module that
// imports "react" (a peer dependency): no build step.
//
//   import { useRoost } from "roost-client/react";
//   function Counter() {
//     const { state, call, status } = useRoost("counter", "c1", { base: "http://127.0.0.1:8000" });
//     return <button onClick={() => call("increment")}>{status}: {state?.count}</button>;
//   }
//
// Guarantees:
// - one client per (address): made when the component mounts, closed (code 1000) when it unmounts or
//   when kind, name or the address change; a new address starts from nothing (state null, no events);
// - `state` is the client's (the welcome's, then each newer state frame's: never an older one);
// - `events` holds the newest `maxEvents` durable events received ({seq, event}, oldest first;
//   default 100): older ones are dropped from the array, never from the client's cursor;
// - `status` follows the client: connecting | open | reconnecting | closed;
// - `call` is the current client's `call`, the same function while the address stays; it works from
//   the component's own effects at mount (a call made before the connection opens waits for it, as
//   RoostClient's do) and rejects with CallNotSent only before the hook's effect made the client
//   (during the first render) or after unmount: it never sends anything then.

import { useCallback, useEffect, useRef, useState } from "react";
import { CallNotSent, RoostClient, actorUrl } from "./roost.js";

/** The newest events a hook keeps unless told otherwise. */
export const MAX_EVENTS = 100;

/** The address `useRoost` connects to: `url` if given, else actorUrl(base, kind, name, prefix). */
export function hookUrl(kind, name, { url, base, prefix = "" } = {}) {
  if (url !== undefined && url !== null) return String(url);
  const at = base ?? globalThis.location;
  if (at === undefined || at === null) {
    throw new TypeError("useRoost: no page location here: pass options.base (where Roost is) or options.url");
  }
  return actorUrl(at, kind, name, prefix);
}

export function useRoost(kind, name, options = {}) {
  const { url, base, prefix, maxEvents = MAX_EVENTS, ...clientOptions } = options;
  const address = hookUrl(kind, name, { url, base, prefix });
  const [client, setClient] = useState(null);
  const [state, setState] = useState(null);
  const [events, setEvents] = useState([]);
  const [status, setStatus] = useState("connecting");
  const settings = useRef({ clientOptions, maxEvents });
  settings.current = { clientOptions, maxEvents };
  // the client of the current address, set by the effect itself: an effect of the same component
  // declared after useRoost (calling at mount) already finds it
  const current = useRef(null);

  useEffect(() => {
    const made = new RoostClient(address, settings.current.clientOptions);
    const onState = () => setState(made.state);
    const onEvent = (e) => {
      const keep = Math.max(0, Math.floor(settings.current.maxEvents));
      const item = { seq: e.detail.seq, event: e.detail.event };
      setEvents((held) => (keep === 0 ? [] : [...held, item].slice(-keep)));
    };
    const onStatus = (e) => setStatus(e.detail.status);
    made.addEventListener("welcome", onState);
    made.addEventListener("state", onState);
    made.addEventListener("event", onEvent);
    made.addEventListener("status", onStatus);
    current.current = made;
    setClient(made);
    setState(null);
    setEvents([]);
    setStatus("connecting");
    made.start();
    return () => {
      made.removeEventListener("welcome", onState);
      made.removeEventListener("state", onState);
      made.removeEventListener("event", onEvent);
      made.removeEventListener("status", onStatus);
      if (current.current === made) current.current = null;
      made.close();
    };
  }, [address]);

  const call = useCallback(
    (method, args, kwargs, callOptions) =>
      current.current === null
        ? Promise.reject(new CallNotSent("useRoost: the client is not made yet"))
        : current.current.call(method, args, kwargs, callOptions),
    [address],
  );
  return { state, call, events, status, client };
}

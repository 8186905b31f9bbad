// The installed package in Node 22, its connection refused, then the server SIGKILLed and restarted:
//   node node_reconnect.mjs HOST:PORT NAME
// It says what it saw on stdout, one JSON line each, for the test to take its next step:
// "refused" once a connection attempt was refused (nothing listens on HOST:PORT yet), {"connected"}
// once a call made before the server listened got its result, "refused" again once an attempt after
// the server went away was refused, then {"resumed"}: the state of the welcome after the restart
// and the result and state of a call made after it. Node's own WebSocket reports a refused
// connection with an `error` event and no `close`: the client must reconnect anyway.
import { RoostClient, actorUrl } from "roost-client";

const [addr, name] = process.argv.slice(2);
const say = (obj) => console.log(JSON.stringify(obj));
let refused = 0; // connection attempts that failed before opening
let reported = 0;

/** Node's WebSocket, counting the attempts refused: the step the test waits for before going on. */
class Counted extends WebSocket {
  constructor(url) {
    super(url);
    let opened = false;
    let failed = false;
    this.addEventListener("open", () => (opened = true));
    this.addEventListener("error", () => {
      if (opened || failed) return;
      failed = true;
      refused += 1;
      if (refused > reported) {
        reported = refused;
        say({ refused });
      }
    });
  }
}

function next(client, type, test = () => true, ms = 30_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} within ${ms} ms`)), ms);
    const listener = (e) => {
      if (!test(e.detail)) return;
      clearTimeout(timer);
      client.removeEventListener(type, listener);
      resolve(e.detail);
    };
    client.addEventListener(type, listener);
  });
}

const client = new RoostClient(actorUrl(`http://${addr}`, "counter", name), {
  WebSocketImpl: Counted,
  backoff: { base: 0.1, cap: 0.5 },
});
try {
  client.start(); // nothing listens yet: refused
  const first = await client.call("increment", [1], {}, { timeout: 30_000 });
  say({ connected: { result: first, state: client.state, welcomes: client.welcomes } });
  // the server is SIGKILLed; once an attempt is refused ("refused" again) it starts again
  const { welcome } = await next(client, "welcome");
  const second = await client.call("increment", [1], {}, { timeout: 30_000 });
  say({
    resumed: {
      welcomeState: welcome.state,
      resume: welcome.resume,
      result: second,
      state: client.state,
      welcomes: client.welcomes,
      reconnects: client.reconnects,
    },
  });
  client.close();
  process.exit(0);
} catch (err) {
  say({ error: String(err && err.stack ? err.stack : err), status: client.status, refused });
  process.exit(1);
}

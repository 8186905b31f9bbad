// The installed package (npm install roost-client-X.tgz) in Node 22 against a real Roost server:
//   node node_client.mjs HOST:PORT PREFIX NAME
// Connects to counter/NAME and room/NAME under PREFIX ("" at the root), calls, and prints one JSON
// line: what it saw (the URLs, the welcome's state, results, the state and the event received).
import { RoostClient, actorUrl, RpcError } from "roost-client";

const [addr, prefix, name] = process.argv.slice(2);

function next(client, type, test = () => true) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} within 10 s`)), 10_000);
    const listener = (e) => {
      if (!test(e.detail)) return;
      clearTimeout(timer);
      client.removeEventListener(type, listener);
      resolve(e.detail);
    };
    client.addEventListener(type, listener);
  });
}

try {
  const counterUrl = actorUrl(`http://${addr}`, "counter", name, prefix);
  const counter = new RoostClient(counterUrl);
  const welcomed = next(counter, "welcome");
  counter.start();
  const { welcome } = await welcomed;
  const stateSeen = next(counter, "state", (d) => d.state.count === 2);
  const result = await counter.call("increment", [2]);
  const { state } = await stateSeen;
  let failed = null;
  try {
    await counter.call("no_such_method");
  } catch (err) {
    failed = err instanceof RpcError ? err.code : String(err);
  }
  counter.close();

  const roomUrl = actorUrl(`http://${addr}`, "room", name, prefix);
  const room = new RoostClient(roomUrl);
  const roomWelcomed = next(room, "welcome");
  room.start();
  await roomWelcomed;
  const eventSeen = next(room, "event");
  const seq = await room.call("say", ["hello from node"], { author: "node" });
  const event = await eventSeen;
  room.close();

  console.log(
    JSON.stringify({
      counterUrl,
      roomUrl,
      welcome: { actor: welcome.actor, state: welcome.state },
      result,
      state,
      clientState: counter.state,
      failed,
      said: seq,
      event,
      status: counter.status,
    }),
  );
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack ? err.stack : err) }));
  process.exitCode = 1;
}

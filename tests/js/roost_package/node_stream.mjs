// The installed package in Node 22 against a real Roost server: streaming calls.
//   node node_stream.mjs HOST:PORT NAME
// On counter/NAME: count_to through `stream` (an async iterator) and through `call` with `onChunk`,
// a loop left early, a streaming call given a key, and a call with bad arguments; prints one JSON line.
import { RoostClient, RpcError, actorUrl } from "roost-client";

const [addr, name] = process.argv.slice(2);

try {
  const sent = []; // every frame the client sent
  class Recording extends WebSocket {
    send(data) {
      sent.push(JSON.parse(data));
      super.send(data);
    }
  }
  const client = new RoostClient(actorUrl(`http://${addr}`, "counter", name), { WebSocketImpl: Recording });
  client.start();

  const stream = client.stream("count_to", [3], {}, { timeout: 20000 });
  const iterated = [];
  for await (const chunk of stream) iterated.push(chunk);

  const chunks = [];
  const result = await client.call("count_to", [2], {}, { onChunk: (c) => chunks.push(c), timeout: 20000 });

  const early = [];
  for await (const chunk of client.stream("count_to", [3])) {
    early.push(chunk);
    break; // the call is forgotten; the server still runs it
  }

  let keyed = null;
  try {
    await client.call("count_to", [1], {}, { onChunk: () => {}, idempotencyKey: "k1" });
  } catch (err) {
    keyed = `${err.name}: ${err.message}`;
  }

  let bad = null;
  const started = Date.now();
  try {
    await client.call("increment", "not a list", {}, { timeout: 20000 });
  } catch (err) {
    bad = err instanceof RpcError ? { code: err.code, message: err.message } : String(err);
  }
  const badMs = Date.now() - started;
  const after = await client.call("increment", [0]);
  const pending = client._pending.size; // the stream left early is not waited for
  client.close();

  const streamed = sent.filter((f) => f.method === "count_to");
  console.log(
    JSON.stringify({
      iterated,
      done: stream.done,
      streamResult: stream.result,
      chunks,
      result,
      early,
      keyed,
      bad,
      promptly: badMs < 10000,
      after,
      keys: streamed.map((f) => f.idempotency_key ?? null),
      pending,
    }),
  );
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack ? err.stack : err) }));
  process.exit(1); // a client left open would keep Node running
}

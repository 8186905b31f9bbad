// The package's declarations, used as a package user would: this file must typecheck.
import {
  actorUrl,
  CallNotSent,
  type ClientFrame,
  MessageText,
  OutcomeUnknown,
  RoostClient,
  RpcError,
  type ServerFrame,
} from "roost-client";
import { useRoost, type UseRoost } from "roost-client/react";

const client = new RoostClient(actorUrl("http://127.0.0.1:8000", "counter", "c1", "/roost"), {
  cursor: 0,
  maxQueued: 10,
  backoff: { base: 0.1, cap: 2 },
});
client.addEventListener("state", (e) => console.log(e.detail.seq, e.detail.state));
client.addEventListener("welcome", (e) => console.log(e.detail.welcome.resume, e.detail.welcome.cursor));
client.addEventListener("status", (e) => console.log(e.detail.status === "reconnecting"));
client.start();

async function increment(): Promise<number> {
  try {
    return await client.call<number>("increment", [1], {}, { timeout: 5000, idempotencyKey: true });
  } catch (err) {
    if (err instanceof RpcError) console.log(err.code);
    if (err instanceof OutcomeUnknown) console.log(err.idempotencyKey);
    if (err instanceof CallNotSent) console.log("not sent");
    throw err;
  }
}

async function count(): Promise<number[]> {
  const chunks: number[] = [];
  for await (const chunk of client.stream<number>("count_to", [3], {}, { timeout: 5000 })) chunks.push(chunk);
  await client.call<null, number>("count_to", [2], {}, { onChunk: (chunk) => chunks.push(chunk + 1) });
  const streamed = client.stream<number, null>("count_to", [1]);
  for await (const chunk of streamed) chunks.push(chunk);
  if (streamed.done && streamed.result === null) chunks.push(0);
  return chunks;
}

function describe(frame: ServerFrame): string {
  switch (frame.type) {
    case "welcome":
      return `${frame.actor.kind}/${frame.actor.name} at ${frame.cursor} (${frame.resume})`;
    case "state":
    case "event":
      return `seq ${frame.seq}`;
    case "rpc_result":
      return frame.ok ? JSON.stringify(frame.result) : frame.error.code;
    case "auth_result":
      return frame.ok ? String(frame.exp) : frame.error.message;
    case "rpc_chunk":
      return frame.id;
    case "pong":
      return String(frame.id);
    case "error":
      return frame.id === undefined ? frame.code : `${frame.id}: ${frame.code}`;
    case "message":
      return JSON.stringify(frame.data);
  }
}

const frames: ClientFrame[] = [
  { type: "rpc", id: "1", method: "increment", args: [1], idempotency_key: null },
  { type: "message", data: { hello: [1, true, null] } },
  { type: "subscribe", events: false },
  { type: "ping", id: 7 },
  { type: "auth", token: "t" },
];

function View(): string {
  const roost: UseRoost<{ count: number }> = useRoost<{ count: number }>("counter", "c1", {
    base: "http://127.0.0.1:8000",
    prefix: "/roost",
    maxEvents: 10,
  });
  void roost.call<number>("increment");
  void roost.call<null, number>("count_to", [2], {}, { onChunk: (chunk) => console.log(chunk + 1) });
  return `${roost.status} ${roost.state?.count ?? 0} ${roost.events.length} ${roost.client?.cursor}`;
}

export { count, describe, frames, increment, View };
export const text = new MessageText().text("m1");

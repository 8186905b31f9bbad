// Wrong uses of the package: each line marked "error TSnnnn" must fail to typecheck with that code.
import { actorUrl, type ClientFrame, RoostClient, type StateFrame } from "roost-client";
import { useRoost } from "roost-client/react";

const client = new RoostClient("ws://127.0.0.1:8000/agents/counter/c1");
void client.call(42); // error TS2345: a method is named by a string
void client.call("increment", 1); // error TS2345: positional arguments are an array
actorUrl("http://127.0.0.1:8000", "counter"); // error TS2554: the name is missing
new RoostClient("ws://x", { maxQueued: "10" }); // error TS2322: a count is a number
const frame: ClientFrame = { type: "rpc", method: "increment" }; // error TS2322: an rpc frame has an id
const seq: string = ({} as StateFrame).seq; // error TS2322: a seq is a number
useRoost("counter"); // error TS2554: the name is missing
useRoost("counter", "c1", { maxEvents: "all" }); // error TS2322: maxEvents is a number
client.addEventListener("state", (e) => e.detail.count); // error TS2339: the detail is {state, seq}
void client.call("count_to", [1], {}, { onChunk: () => {}, idempotencyKey: "k" }); // error TS2769: a stream takes no key
export { frame, seq };

// An unchanged Cloudflare Agents client (npm `agents`' AgentClient, on PartySocket) against Roost.
// Driven by tests/test_cloudflare_clients.py: `node cf_agent_client.mjs HOST NAME`; it prints one JSON
// object per step and, after the step "kill-now", waits for the line "restarted" on stdin (the test
// SIGKILLs the server and starts it again on the same port meanwhile).
import { createInterface } from "node:readline";
import { AgentClient } from "agents/client";

const [host, name] = process.argv.slice(2);
const out = (step) => console.log(JSON.stringify(step));
const stdin = createInterface({ input: process.stdin });
const lines = [];
let wake = null;
stdin.on("line", (line) => {
  lines.push(line);
  if (wake) wake();
});
async function line() {
  while (lines.length === 0) await new Promise((resolve) => (wake = resolve));
  return lines.shift();
}
async function until(check, what) {
  const deadline = Date.now() + 20000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const updates = [];
const stateErrors = [];
let closes = 0;
const client = new AgentClient({
  agent: "counter",
  name,
  host,
  minReconnectionDelay: 100,
  maxReconnectionDelay: 400,
  onStateUpdate: (state, source) => updates.push({ state, source }),
  onStateUpdateError: (error) => stateErrors.push(error),
});
client.addEventListener("close", () => (closes += 1));

try {
  await client.ready;
  await until(() => updates.length > 0, "the first state");
  out({ step: "ready", identified: client.identified, name: client.name, agent: client.agent, state: client.state });

  const called = await client.call("increment", [2]);
  const stubbed = await client.stub.increment(3);
  const chunks = [];
  const streamed = await client.call("count_to", [2], { stream: { onChunk: (chunk) => chunks.push(chunk) } });
  let failed = null;
  try {
    await client.call("no_such_method", []);
  } catch (error) {
    failed = error.message;
  }
  client.setState({ count: 1000 });
  await until(() => stateErrors.length > 0, "the refusal of the client's state");
  const stateAfterRefusal = client.state; // kept: the server's next cf_agent_state replaces it
  await until(() => updates.some((u) => u.source === "server" && u.state.count === 7), "the state after the calls");
  out({ step: "calls", called, stubbed, chunks, streamed, failed, stateError: stateErrors[0], stateAfterRefusal });

  out({ step: "kill-now" });
  if ((await line()) !== "restarted") throw new Error("expected 'restarted'");
  await until(() => closes > 0, "the close of the killed server's socket");
  await client.ready; // identity again, from the new server process
  const after = await client.call("increment", [1]);
  out({ step: "after", after, state: client.state, closes });
  client.close();
  process.exit(0);
} catch (error) {
  out({ step: "error", message: String(error && error.stack ? error.stack : error) });
  process.exit(1);
}

// An unchanged Cloudflare AgentClient (npm `agents`) against Roost's final closes and refusals.
// Driven by tests/test_cloudflare_clients.py: `node cf_final_close.mjs HOST NAME`. It prints one JSON
// object per step: "refused" (a connection to a kind that does not exist), "called" (a call with bad
// arguments), then "delete-now", after which the test deletes the actor counter/NAME through the
// admin API; then "final": how the client's connection ended (or "error").
import { AgentClient } from "agents/client";

const [host, name] = process.argv.slice(2);
const out = (step) => console.log(JSON.stringify(step));
// The client's own verdict that a close was final (onConnectionError: no reconnect follows), as a
// promise of its code and reason, and the option that reports it.
function finalClose() {
  let onConnectionError;
  const promise = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no final close within 20 s")), 20000);
    onConnectionError = (error) => {
      clearTimeout(timer);
      resolve({ code: error.code, reason: error.reason });
    };
  });
  promise.catch(() => {}); // a rejection is seen where the promise is awaited
  return { promise, onConnectionError };
}
const fast = { minReconnectionDelay: 50, maxReconnectionDelay: 100 };

try {
  // a refused connection: told in the dialect (roost_error), closed with a code the client stops at
  const told = [];
  const refusedEnd = finalClose();
  const refused = new AgentClient({ agent: "no-such-kind", name, host, ...fast, onConnectionError: refusedEnd.onConnectionError });
  refused.addEventListener("message", (event) => told.push(JSON.parse(event.data)));
  const refusal = await refusedEnd.promise;
  out({ step: "refused", ...refusal, told, retries: refused.retryCount });

  const end = finalClose();
  const client = new AgentClient({ agent: "counter", name, host, ...fast, onConnectionError: end.onConnectionError });
  let opens = 0;
  client.addEventListener("open", () => (opens += 1));
  await client.ready;
  const started = Date.now();
  let failed = null;
  try {
    await client.call("increment", "not a list", { timeout: 20000 });
  } catch (error) {
    failed = error.message;
  }
  const after = await client.call("increment", [2]);
  out({ step: "called", failed, promptly: Date.now() - started < 10000, after });

  out({ step: "delete-now" });
  const { code, reason } = await end.promise;
  out({ step: "final", code, reason, opens, retries: client.retryCount });
  process.exit(0);
} catch (error) {
  out({ step: "error", message: String(error && error.stack ? error.stack : error) });
  process.exit(1);
}

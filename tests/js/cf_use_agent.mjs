// useAgent (npm agents/react) in React 19, rendered into a jsdom document in Node 22: an unchanged
// Cloudflare React component against Roost. `node cf_use_agent.mjs HOST NAME` prints one JSON line.
import { JSDOM } from "jsdom";
const dom = new JSDOM("<!doctype html><div id=root></div>", { url: "http://localhost/" });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
globalThis.IS_REACT_ACT_ENVIRONMENT = false;
const React = (await import("react")).default;
const { createRoot } = await import("react-dom/client");
const { useAgent } = await import("agents/react");

const [host, name] = process.argv.slice(2);
const seen = [];
function Counter() {
  const [state, setState] = React.useState(null);
  const agent = useAgent({ agent: "counter", name, host, onStateUpdate: (s) => setState(s) });
  React.useEffect(() => {
    agent.ready.then(() => agent.call("increment", [5])).then((r) => seen.push(r));
  }, [agent]);
  return React.createElement("p", { id: "count" }, state === null ? "none" : String(state.count));
}
createRoot(document.getElementById("root")).render(React.createElement(Counter));
const deadline = Date.now() + 15000;
while (document.getElementById("count")?.textContent !== "5") {
  if (Date.now() > deadline) { console.log(JSON.stringify({ error: document.body.innerHTML })); process.exit(1); }
  await new Promise((r) => setTimeout(r, 20));
}
console.log(JSON.stringify({ shown: document.getElementById("count").textContent, result: seen[0] }));
process.exit(0);

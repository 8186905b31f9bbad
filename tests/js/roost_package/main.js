// A React app built with Vite from the installed package: useRoost from "roost-client/react".
// The page's query names the Roost server (?roost=HOST:PORT) and the actors (&name=NAME): the
// counter NAME (its state, increment, the connection's status) and the room NAME (its newest two
// events), and the counter NAME-at-mount, called once from an effect at mount. "Rename" moves the
// hooks to NAME-2.
import { createElement as h, StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useRoost } from "roost-client/react";

const query = new URLSearchParams(location.search);
const base = `http://${query.get("roost")}`;

function Counter({ name }) {
  const { state, call, status } = useRoost("counter", name, { base });
  const [last, setLast] = useState("none");
  const increment = () =>
    call("increment").then(
      (n) => setLast(String(n)),
      (err) => setLast(`${err.name}: ${err.message}`),
    );
  return h(
    "section",
    null,
    h("p", null, "status ", h("span", { id: "status" }, status)),
    h("p", null, "count ", h("span", { id: "count" }, state === null ? "…" : String(state.count))),
    h("button", { id: "increment", onClick: increment }, "Increment"),
    h("p", null, "last reply ", h("span", { id: "last" }, last)),
  );
}

function AtMount({ name }) {
  // a call from the component's own effect, at mount: it waits for the connection; every outcome is
  // shown, so a call refused before the connection would show
  const { call } = useRoost("counter", `${name}-at-mount`, { base });
  const [replies, setReplies] = useState([]);
  useEffect(() => {
    call("increment", [5]).then(
      (n) => setReplies((r) => [...r, String(n)]),
      (err) => setReplies((r) => [...r, err.name]),
    );
  }, [call]);
  return h("p", null, "at mount ", h("span", { id: "at-mount" }, replies.join(",")));
}

function Room({ name }) {
  const { events, status } = useRoost("room", name, { base, maxEvents: 2 });
  return h(
    "section",
    null,
    h("p", null, "room ", h("span", { id: "room-status" }, status)),
    h("ol", { id: "said" }, ...events.map((e) => h("li", { key: e.seq }, e.event.text))),
  );
}

function App() {
  const [name, setName] = useState(query.get("name"));
  return h(
    "main",
    null,
    h("p", null, "name ", h("span", { id: "name" }, name)),
    h("button", { id: "rename", onClick: () => setName(`${name}-2`) }, "Rename"),
    h(Counter, { name }),
    h(Room, { name }),
    h(AtMount, { name, key: name }),
  );
}

createRoot(document.getElementById("root")).render(h(StrictMode, null, h(App)));

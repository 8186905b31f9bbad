// actorUrl as a package user calls it, in Node (no page location): prints one JSON object of
// case -> URL.
import { actorUrl } from "roost-client";

const cases = {
  root: actorUrl("http://127.0.0.1:8000", "counter", "c1"),
  rootEmpty: actorUrl("http://127.0.0.1:8000", "counter", "c1", ""),
  mount: actorUrl("http://127.0.0.1:8000", "counter", "c1", "/roost"),
  mountSlashes: actorUrl("http://127.0.0.1:8000", "counter", "c1", "/roost/"),
  mountBare: actorUrl("http://127.0.0.1:8000", "counter", "c1", "roost"),
  mountDeep: actorUrl("https://example.com", "counter", "c1", "/api/v1/roost"),
  mountFromBase: actorUrl("https://example.com/roost/", "counter", "c1"),
  urlObject: actorUrl(new URL("http://127.0.0.1:8000/"), "counter", "a/b c", "/roost"),
  wss: actorUrl("wss://example.com", "counter", "c1", "/roost"),
};
console.log(JSON.stringify(cases));

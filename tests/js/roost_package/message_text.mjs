// MessageText as a package user feeds it, in Node: the events come as JSON in argv[2]; prints one
// JSON object: what each feed added, the texts, the gaps and duplicates counted.
import { MessageText } from "roost-client";

const events = JSON.parse(process.argv[2]);
const text = new MessageText();
const added = events.map((ev) => text.feed(ev));
const ids = [...new Set(events.map((ev) => ev.payload && ev.payload.message_id))].filter(Boolean);
console.log(
  JSON.stringify({
    added,
    texts: Object.fromEntries(ids.map((id) => [id, text.text(id)])),
    gaps: text.gaps,
    duplicates: text.duplicates,
  }),
);

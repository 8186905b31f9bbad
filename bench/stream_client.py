"""The load client of section ``streams``: ``python -m bench.stream_client --spec JSON``; prints one
JSON object.

``actors`` chat actors each get ``subs`` subscribers (``?subscribe=events``) and one driver connection
that sends one message asking for ``tokens`` words; every subscriber reads until its actor's
``turn_completed``. Reported: ``model_delta`` frames and words received per second summed over all
subscribers (from the first send to the last completion), and per word the time from the model
yielding it (its text is the wall clock in ns) to a subscriber reading it: p50, p99, max; and the
time between two ``model_delta`` frames a subscriber reads (p50, p99): with a model that yields only
when asked, a word is stamped when the worker asks for it, so a wait of the worker's before it asks
(its turn in a busy loop) is not in the lag but is in this gap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import orjson
import uvloop

from bench.stats import pct
from bench.wsclient import WsConn, connect_many, masked_frame


async def _read(conn: WsConn, lags: list[float], gaps: list[float], counts: list[int]) -> None:
    frames = words = 0
    last = 0
    while True:
        raw = await conn.recv()
        now = time.time_ns()
        msg = orjson.loads(raw)
        event = msg.get("event") if msg.get("type") == "event" else None
        if event is None:
            continue
        if event["event_type"] == "model_delta":
            frames += 1
            if last:
                gaps.append((now - last) / 1e6)
            last = now
            for word in event["payload"]["text"].split():
                lags.append((now - int(word)) / 1e6)
                words += 1
        elif event["event_type"] in ("turn_completed", "turn_failed"):
            counts.append(frames)
            counts.append(words)
            return


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    port, actors, subs, tokens = (int(spec[k]) for k in ("port", "actors", "subs", "tokens"))
    pace = float(spec.get("pace", 0.0))  # words a second each model yields (0: as fast as it can)
    prefix = f"/agents/bchat/{spec['prefix']}"
    conns: list[WsConn] = []
    drivers: list[WsConn] = []
    try:
        for a in range(actors):
            conns += await connect_many(port, [f"{prefix}-{a}?subscribe=events"] * subs, welcome=True)
        drivers = await connect_many(
            port, [f"{prefix}-{a}?subscribe=none" for a in range(actors)], welcome=True
        )
        lags: list[float] = []
        gaps: list[float] = []
        counts: list[int] = []
        readers = [asyncio.ensure_future(_read(c, lags, gaps, counts)) for c in conns]
        frame = masked_frame(
            orjson.dumps({"type": "rpc", "id": "s", "method": "send", "args": [f"{tokens} {pace:g}"]})
        )
        t0 = time.perf_counter()
        for d in drivers:
            d.send(frame)
        async with asyncio.timeout(float(spec["timeout"])):
            await asyncio.gather(*readers)
        secs = time.perf_counter() - t0
        frames, words = sum(counts[0::2]), sum(counts[1::2])
        lags.sort()
        gaps.sort()
        return {
            "actors": actors,
            "subs": subs,
            "tokens": tokens,
            "secs": secs,
            "frames": frames,
            "frames_s": frames / secs,
            "words_s": words / secs,
            "words_expected": actors * subs * tokens,
            "words": words,
            "lag_p50_ms": pct(lags, 50),
            "lag_p99_ms": pct(lags, 99),
            "lag_max_ms": lags[-1] if lags else 0.0,
            "gap_p50_ms": pct(gaps, 50),
            "gap_p99_ms": pct(gaps, 99),
        }
    finally:
        for c in conns + drivers:
            c.close()
        await asyncio.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.stream_client")
    ap.add_argument("--spec", required=True)
    a = ap.parse_args()
    print(json.dumps(uvloop.run(run(json.loads(a.spec)))))


if __name__ == "__main__":
    main()

"""Settings ``roost serve`` gives the libraries under it before they are imported."""

__all__ = ["MAX_HANDSHAKE_LINE"]

#: The websockets library refuses handshake lines over 8 KiB by default. A 256-character name needs up
#: to 3 KiB percent-encoded; raising the limit lets longer (invalid) names reach the app and get a
#: clear 4400. Past this limit the handshake is refused with HTTP 414 (see roost.transport.uvicorn_ws).
#: websockets reads it once, when it is imported: :mod:`roost.cli` sets it first thing.
MAX_HANDSHAKE_LINE = "32768"

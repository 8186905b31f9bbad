"""A testing kit shipped with the package; importable without pytest.

- :class:`ActorKit` (:mod:`roost.testing.kit`): actors in process over real SQLite files, a fake clock by
  default; :class:`KitConnection` drives one connection, :class:`RecordingSink` records its frames and
  :class:`FaultySink` drops or holds them as a bad network would.
- :class:`WsClient` and :func:`connect` (:mod:`roost.testing.ws`): a WebSocket test client over a real
  socket, with ``recv``/``rpc``/``call``/``results``/``wait_for``/``read_until_closed``; :func:`rpc_frame`,
  :func:`ping_frame` and :func:`encode` build frames to send raw; :func:`close_code_sync` reads a
  blocking connection to its close.
- :func:`serve` (:mod:`roost.testing.server`): an app served on a real socket in the test's loop.
- :func:`until` (:mod:`roost.testing.waiting`): wait for a condition, bounded; never a sleep.
- :func:`open_files` and :func:`open_sockets` (:mod:`roost.testing.fds`): what this process has open,
  so a test sees a server in its process let go of a file or a socket.
- :func:`fires`, :func:`schedule_rows` and :func:`queue_rows` (:mod:`roost.testing.files`): what an
  actor's wake-ups and its queue did, read from its file once no process has it open.

Every guarantee is in the docstring of the thing that gives it, and tested in
``tests/test_testing_kit.py``.
"""

from roost.testing.fds import open_files, open_sockets
from roost.testing.files import Fire, QueueRow, ScheduleRow, fires, queue_rows, schedule_rows
from roost.testing.kit import ActorKit, FaultySink, KitConnection, RecordingSink
from roost.testing.server import serve
from roost.testing.waiting import until
from roost.testing.ws import WsClient, close_code_sync, connect, encode, ping_frame, rpc_frame

__all__ = [
    "ActorKit",
    "FaultySink",
    "Fire",
    "KitConnection",
    "QueueRow",
    "RecordingSink",
    "ScheduleRow",
    "WsClient",
    "close_code_sync",
    "connect",
    "encode",
    "fires",
    "open_files",
    "open_sockets",
    "ping_frame",
    "queue_rows",
    "rpc_frame",
    "schedule_rows",
    "serve",
    "until",
]

"""Storage: actor paths, actor files (locking, durability of writes, turns), migrations, the directory.

Real SQLite files under ``tmp_path``; a real child process for the cross-process lock.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roost.storage import (
    MAX_NAME_CHARS,
    ActorFile,
    ActorLocked,
    Directory,
    DirectoryBusy,
    Durability,
    InvalidActorAddress,
    Migration,
    MigrationError,
    StorageError,
    actor_digest,
    actor_path,
    validate_kind,
    validate_name,
)
from roost.storage.migrations import FRAMEWORK_MIGRATIONS

ROOT = Path(__file__).resolve().parent.parent

HOSTILE_NAMES = [
    "../../etc/passwd",
    "a/b",
    "a%2Fb",
    "..",
    ".",
    "/",
    "/etc/passwd",
    "\\..\\..\\windows",
    "\x00",
    "a\x00b",
    "x" * MAX_NAME_CHARS,
    "🦜" * MAX_NAME_CHARS,
    "日本語",
    "e\u0301",
    "é",
    "🦜",
    " ",
    "a\nb",
]


@pytest.fixture
def actor_file(data_dir: Path) -> Iterator[ActorFile]:
    file = ActorFile.open(actor_path(data_dir, "counter", "x"), "counter", "x")
    try:
        yield file
    finally:
        file.close()


@pytest.fixture
def directory(data_dir: Path) -> Iterator[Directory]:
    d = Directory(data_dir)
    try:
        yield d
    finally:
        d.close()


def read_only(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Run ``sql`` on a fresh connection (what another process would see), then close it."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# -- paths -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_address_a_file_strictly_inside_the_data_dir(data_dir: Path, name: str) -> None:
    path = actor_path(data_dir, "counter", name).resolve()
    root = data_dir.resolve()
    assert path.is_relative_to(root / "actors" / "counter")
    assert path != root
    assert path.suffix == ".sqlite"
    assert "\x00" not in str(path)


def test_opening_every_hostile_name_creates_files_only_inside_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "inner" / "data"
    for name in HOSTILE_NAMES:
        ActorFile.open(actor_path(data_dir, "counter", name), "counter", name).close()
    files = [p.resolve() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == len(HOSTILE_NAMES)
    assert all(p.is_relative_to(data_dir.resolve() / "actors" / "counter") for p in files)


def test_different_names_never_share_a_path(data_dir: Path) -> None:
    names = [*HOSTILE_NAMES, "a", "A", "a\x00", "\x00a", "b", "a b", "a%2fb", "a%252Fb"]
    paths = {actor_path(data_dir, "counter", n) for n in names}
    assert len(paths) == len(set(names))
    assert actor_path(data_dir, "counter", "a/b") != actor_path(data_dir, "counter", "a%2Fb")
    assert actor_path(data_dir, "counter", "e\u0301") != actor_path(data_dir, "counter", "é")


def test_same_name_in_different_kinds_never_shares_a_path(data_dir: Path) -> None:
    assert actor_path(data_dir, "counter", "x") != actor_path(data_dir, "chat", "x")
    # kind and name are separated, so moving characters from one to the other changes the digest
    assert actor_digest("ab", "c") != actor_digest("a", "bc")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_same_name_always_gives_the_same_path(data_dir: Path, name: str) -> None:
    copy = "".join(list(name))  # an equal but distinct string object
    assert actor_path(data_dir, "counter", name) == actor_path(data_dir, "counter", copy)


def test_path_layout_is_stable_across_versions(data_dir: Path) -> None:
    # changing the digest or the layout would orphan every existing actor's data
    h = hashlib.blake2b(b"counter\x00a/b", digest_size=20).hexdigest()
    expected = data_dir / "actors" / "counter" / h[0:2] / h[2:4] / f"{h}.sqlite"
    assert actor_path(data_dir, "counter", "a/b") == expected
    assert actor_digest("counter", "a/b") == h


@pytest.mark.parametrize("name", ["x", "x" * MAX_NAME_CHARS, "🦜" * MAX_NAME_CHARS, "\x00", ".."])
def test_names_of_1_to_256_code_points_are_valid(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "x" * (MAX_NAME_CHARS + 1), "x" * 10_240, "\ud800", "a\udfffb", None, 5, b"abc", ["a"]],
)
def test_invalid_names_are_refused_with_invalid_actor_address(data_dir: Path, name: object) -> None:
    with pytest.raises(InvalidActorAddress) as info:
        validate_name(name)
    assert isinstance(info.value, ValueError)
    assert info.value.field == "name"
    if isinstance(name, str):
        with pytest.raises(InvalidActorAddress):
            actor_path(data_dir, "counter", name)
    assert not data_dir.exists()


@pytest.mark.parametrize("kind", ["counter", "a", "chat_room", "my-kind2", "a" * 63])
def test_valid_kinds_are_accepted(kind: str) -> None:
    assert validate_kind(kind) == kind


@pytest.mark.parametrize(
    "kind",
    ["Counter", "../x", "", "a/b", "a" * 64, "1abc", "-x", "_x", "counter\n", "ka\x00", "kïnd", ".", None, 3],
)
def test_invalid_kinds_are_refused_with_invalid_actor_address(data_dir: Path, kind: object) -> None:
    with pytest.raises(InvalidActorAddress) as info:
        validate_kind(kind)
    assert isinstance(info.value, ValueError)
    assert info.value.field == "kind"
    if isinstance(kind, str):
        with pytest.raises(InvalidActorAddress):
            actor_path(data_dir, kind, "x")


# -- ActorFile: opening ----------------------------------------------------------------------------------


def test_open_creates_a_wal_file_with_the_framework_tables(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "日本/語")
    file = ActorFile.open(path, "counter", "日本/語")
    try:
        assert file.created
        assert file.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        file.close()
    tables = {row[0] for row in read_only(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"roost_meta", "roost_state", "roost_log", "roost_migrations"} <= tables
    assert path.read_bytes()[18:20] == b"\x02\x02"  # WAL is persistent in the file header
    meta = dict(read_only(path, "SELECT key, value FROM roost_meta"))
    assert meta["kind"] == "counter"
    assert meta["name"] == "日本/語"


def test_reopened_file_is_not_reported_as_created(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    ActorFile.open(path, "counter", "x").close()
    file = ActorFile.open(path, "counter", "x")
    try:
        assert not file.created
    finally:
        file.close()


def test_new_file_starts_at_the_initial_state_and_seq_0(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    file = ActorFile.open(path, "counter", "x", initial_state='{"count":0}')
    try:
        assert file.load_state() == ('{"count":0}', 0)
        assert file.log_bounds() == (1, 0)
        assert file.replay(0) == []
    finally:
        file.close()


def test_initial_state_never_overwrites_a_stored_state(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    ActorFile.open(path, "counter", "x", initial_state='{"count":0}').close()
    file = ActorFile.open(path, "counter", "x", initial_state='{"count":99}')
    try:
        assert file.load_state() == ('{"count":0}', 0)
    finally:
        file.close()


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
def test_durability_sets_the_synchronous_level(
    data_dir: Path, durability: Durability, synchronous: int
) -> None:
    path = actor_path(data_dir, "counter", "x")
    file = ActorFile.open(path, "counter", "x", durability=durability)
    try:
        assert file.conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
    finally:
        file.close()


# -- ActorFile: single activation ------------------------------------------------------------------------


def test_second_open_in_the_same_process_is_locked_until_close(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    first = ActorFile.open(path, "counter", "x")
    try:
        with pytest.raises(ActorLocked) as info:
            ActorFile.open(path, "counter", "x")
        assert isinstance(info.value, StorageError)
        assert (info.value.kind, info.value.name) == ("counter", "x")
        # a refused open must not disturb the holder
        assert first.load_state() == ("{}", 0)
    finally:
        first.close()
    assert first.closed
    second = ActorFile.open(path, "counter", "x")
    second.close()


_CHILD = """
import sys
from pathlib import Path
from roost.storage import ActorFile
try:
    ActorFile.open(Path(sys.argv[1]), "counter", "x").close()
except Exception as exc:
    print(type(exc).__name__)
else:
    print("opened")
"""


def _open_in_child(path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
def test_actor_file_is_locked_across_processes(data_dir: Path, existing: bool) -> None:
    path = actor_path(data_dir, "counter", "x")
    if existing:
        ActorFile.open(path, "counter", "x").close()
    file = ActorFile.open(path, "counter", "x")
    try:
        assert _open_in_child(path) == "ActorLocked"
        # a refused second open in this process must not release this process's lock either
        with pytest.raises(ActorLocked):
            ActorFile.open(path, "counter", "x")
        assert _open_in_child(path) == "ActorLocked"
    finally:
        file.close()
    assert _open_in_child(path) == "opened"
    ActorFile.open(path, "counter", "x").close()


_HOLDER = """
import sys
from pathlib import Path
from roost.storage import ActorFile
file = ActorFile.open(Path(sys.argv[1]), "counter", "x")
file.begin_turn()
file.write_state('{"count":41}', 1, 1.0)
file.append_log(1, "state", "s1", 1.0)
file.commit()
print("ready", flush=True)
sys.stdin.read()  # hold the file until killed
"""


def test_lock_dies_with_a_sigkilled_process_and_its_commits_survive(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(ActorLocked):
            ActorFile.open(path, "counter", "x")
    finally:
        holder.kill()  # SIGKILL: no close(), no checkpoint
        holder.communicate(timeout=60)
    file = ActorFile.open(path, "counter", "x")
    try:
        assert file.load_state() == ('{"count":41}', 1)
        assert file.replay(0) == [(1, "state", "s1")]
    finally:
        file.close()


# -- ActorFile: writes -----------------------------------------------------------------------------------


def test_committed_state_and_log_survive_reopening(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    file = ActorFile.open(path, "counter", "x")
    file.begin_turn()
    file.write_state('{"count":1}', 1, 1.0)
    file.append_log(1, "state", '{"type":"state","seq":1,"state":{"count":1}}', 1.0)
    file.append_log(2, "event", '{"type":"event","seq":2,"event":"bumped"}', 1.0)
    file.write_state('{"count":1}', 2, 1.0)
    file.commit()
    assert not file.in_transaction
    file.close()

    file = ActorFile.open(path, "counter", "x", initial_state='{"count":0}')
    try:
        assert file.load_state() == ('{"count":1}', 2)
        assert file.log_bounds() == (1, 2)
        assert file.replay(0) == [
            (1, "state", '{"type":"state","seq":1,"state":{"count":1}}'),
            (2, "event", '{"type":"event","seq":2,"event":"bumped"}'),
        ]
    finally:
        file.close()


def test_close_commits_a_pending_batch(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    file = ActorFile.open(path, "counter", "x")
    file.begin_turn()
    file.write_state('{"count":5}', 1, 1.0)
    file.append_log(1, "state", "s1", 1.0)
    file.close()
    file.close()  # idempotent
    assert read_only(path, "SELECT state, seq FROM roost_state") == [('{"count":5}', 1)]
    assert read_only(path, "SELECT seq FROM roost_log") == [(1,)]


def test_rolled_back_turn_leaves_the_old_state(actor_file: ActorFile) -> None:
    actor_file.begin_turn()  # the first turn of a batch is the transaction
    actor_file.write_state('{"count":1}', 1, 1.0)
    actor_file.append_log(1, "state", "s1", 1.0)
    actor_file.end_turn()
    actor_file.begin_turn()  # a later turn is a savepoint inside it
    actor_file.write_state('{"count":2}', 2, 2.0)
    actor_file.append_log(2, "state", "s2", 2.0)
    actor_file.abort_turn()
    actor_file.commit()

    assert actor_file.load_state() == ('{"count":1}', 1)
    assert actor_file.replay(0) == [(1, "state", "s1")]


def test_rolled_back_turn_is_gone_after_reopening(data_dir: Path) -> None:
    path = actor_path(data_dir, "counter", "x")
    file = ActorFile.open(path, "counter", "x", initial_state='{"count":0}')
    file.begin_turn()
    file.write_state('{"count":1}', 1, 1.0)
    file.append_log(1, "state", "s1", 1.0)
    file.abort_turn()
    file.commit()
    file.close()
    assert read_only(path, "SELECT state, seq FROM roost_state") == [('{"count":0}', 0)]
    assert read_only(path, "SELECT count(*) FROM roost_log") == [(0,)]


def test_log_bounds_follow_appends_and_pruning(actor_file: ActorFile) -> None:
    assert actor_file.log_bounds() == (1, 0)
    actor_file.begin_turn()
    for seq in range(1, 6):
        actor_file.append_log(seq, "state", f"s{seq}", float(seq))
    actor_file.commit()
    assert actor_file.log_bounds() == (1, 5)

    actor_file.begin_turn()
    actor_file.prune_log(3)
    actor_file.commit()
    assert actor_file.log_bounds() == (3, 5)
    assert [seq for seq, _, _ in actor_file.replay(0)] == [3, 4, 5]

    actor_file.begin_turn()
    actor_file.prune_log(3)  # pruning again up to the same seq removes nothing more
    actor_file.commit()
    assert actor_file.log_bounds() == (3, 5)


def test_replay_returns_frames_after_the_cursor_in_seq_order(actor_file: ActorFile) -> None:
    actor_file.begin_turn()
    for seq in (3, 1, 5, 2, 4):  # insertion order must not matter
        actor_file.append_log(seq, "event" if seq % 2 else "state", f"f{seq}", 0.0)
    actor_file.commit()
    assert actor_file.replay(0) == [
        (1, "event", "f1"),
        (2, "state", "f2"),
        (3, "event", "f3"),
        (4, "state", "f4"),
        (5, "event", "f5"),
    ]
    assert [s for s, _, _ in actor_file.replay(2)] == [3, 4, 5]
    assert [s for s, _, _ in actor_file.replay(4)] == [5]
    assert actor_file.replay(5) == []
    assert actor_file.replay(100) == []


def test_a_replay_page_is_bounded_in_rows_and_in_bytes_and_holds_at_least_one_row(
    actor_file: ActorFile,
) -> None:
    actor_file.begin_turn()
    for seq in range(1, 11):
        actor_file.append_log(seq, "state", "x" * 1000, 0.0)
    actor_file.commit()
    one = sys.getsizeof("x" * 1000)
    assert [s for s, _, _ in actor_file.replay_page(0, 4, 1 << 20)] == [1, 2, 3, 4]  # rows
    assert [s for s, _, _ in actor_file.replay_page(2, 100, 3 * one)] == [3, 4, 5]  # bytes
    assert [s for s, _, _ in actor_file.replay_page(6, 100, 1)] == [7]  # one row, however big
    assert [s for s, _, _ in actor_file.replay_page(8, 100, 1 << 20)] == [9, 10]
    assert actor_file.replay_page(10, 100, 1 << 20) == []


def test_a_seq_is_never_logged_twice(actor_file: ActorFile) -> None:
    actor_file.begin_turn()
    actor_file.append_log(1, "state", "s1", 0.0)
    with pytest.raises(sqlite3.IntegrityError):
        actor_file.append_log(1, "state", "again", 0.0)
    actor_file.commit()
    assert actor_file.replay(0) == [(1, "state", "s1")]


# -- migrations ------------------------------------------------------------------------------------------


def _open(data_dir: Path, migrations: list[Migration]) -> ActorFile:
    return ActorFile.open(actor_path(data_dir, "counter", "x"), "counter", "x", kind_migrations=migrations)


def _kind_version(file: ActorFile) -> int:
    row = file.conn.execute(
        "SELECT max(version) FROM roost_migrations WHERE component = 'kind:counter'"
    ).fetchone()
    return int(row[0] or 0)


V1: Migration = "CREATE TABLE items (n INTEGER NOT NULL, label TEXT)"
V2: Migration = "INSERT INTO items (n, label) VALUES (1, 'from v2')"


def _add_column(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE items ADD COLUMN extra TEXT DEFAULT 'v3'")


def test_kind_migrations_apply_in_order_exactly_once(data_dir: Path) -> None:
    migrations = [V1, V2, _add_column]
    for _ in range(3):
        file = _open(data_dir, migrations)
        try:
            assert file.conn.execute("SELECT n, label, extra FROM items").fetchall() == [(1, "from v2", "v3")]
            assert _kind_version(file) == 3
        finally:
            file.close()


def test_a_migration_added_later_runs_on_the_next_open(data_dir: Path) -> None:
    _open(data_dir, [V1]).close()
    file = _open(data_dir, [V1, V2])
    try:
        assert file.conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1
        assert _kind_version(file) == 2
    finally:
        file.close()
    file = _open(data_dir, [V1, V2])
    try:
        assert file.conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1
    finally:
        file.close()


@pytest.mark.parametrize(
    "bad_step",
    [
        "INSERT INTO items (n) VALUES (2); CREATE TABLE half (x); INSERT INTO no_such_table VALUES (1)",
        "INSERT INTO items (n) VALUES (2); CREATE TABLE half (x); THIS IS NOT SQL",
    ],
)
def test_a_failing_sql_step_leaves_the_file_at_the_previous_version(data_dir: Path, bad_step: str) -> None:
    _open(data_dir, [V1]).close()
    with pytest.raises(MigrationError) as info:
        _open(data_dir, [V1, bad_step])
    assert (info.value.component, info.value.version) == ("kind:counter", 2)
    assert isinstance(info.value, StorageError)

    file = _open(data_dir, [V1])  # not left locked, and nothing of the failed step is visible
    try:
        assert _kind_version(file) == 1
        assert file.conn.execute("SELECT count(*) FROM items").fetchone()[0] == 0
        tables = {r[0] for r in file.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "half" not in tables
    finally:
        file.close()


def test_a_failing_callable_step_leaves_the_file_at_the_previous_version(data_dir: Path) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO items (n) VALUES (7)")
        raise RuntimeError("boom")

    file = _open(data_dir, [V1])
    file.begin_turn()
    file.write_state('{"kept":true}', 1, 1.0)
    file.commit()
    file.close()
    with pytest.raises(MigrationError, match="boom"):
        _open(data_dir, [V1, half_then_fail])

    file = _open(data_dir, [V1, V2])  # a fixed list migrates from v1
    try:
        assert file.load_state() == ('{"kept":true}', 1)
        assert file.conn.execute("SELECT n FROM items").fetchall() == [(1,)]
        assert _kind_version(file) == 2
    finally:
        file.close()


def test_a_failing_first_migration_leaves_no_half_initialised_actor(data_dir: Path) -> None:
    with pytest.raises(MigrationError):
        _open(data_dir, ["CREATE TABLE items (n); SELECT * FROM missing"])
    file = _open(data_dir, [V1])
    try:
        assert file.load_state() == ("{}", 0)
        assert _kind_version(file) == 1
    finally:
        file.close()


def test_a_file_newer_than_the_code_is_refused(data_dir: Path) -> None:
    _open(data_dir, [V1, V2]).close()
    with pytest.raises(MigrationError) as info:
        _open(data_dir, [V1])
    assert info.value.component == "kind:counter"
    # the refused open changed nothing: newer code still reads the data
    file = _open(data_dir, [V1, V2])
    try:
        assert _kind_version(file) == 2
        assert file.conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1
    finally:
        file.close()


def test_multi_statement_steps_split_only_between_statements(data_dir: Path) -> None:
    step = """
        -- a comment; with a semicolon
        CREATE TABLE notes (body TEXT NOT NULL);
        INSERT INTO notes VALUES ('a;b');
        INSERT INTO notes VALUES ('it''s; fine');  /* ; inside a block comment */
        INSERT INTO notes VALUES ('--;');
        CREATE TABLE "odd;name" (x);
        CREATE TRIGGER copy AFTER INSERT ON notes BEGIN
            INSERT INTO "odd;name" VALUES (new.body);
            INSERT INTO "odd;name" VALUES ('second;');
        END;
        INSERT INTO notes VALUES ('last')
    """
    file = _open(data_dir, [step])
    try:
        assert [r[0] for r in file.conn.execute("SELECT body FROM notes ORDER BY rowid")] == [
            "a;b",
            "it's; fine",
            "--;",
            "last",
        ]
        assert file.conn.execute('SELECT x FROM "odd;name"').fetchall() == [("last",), ("second;",)]
        assert _kind_version(file) == 1
    finally:
        file.close()


def test_kind_migrations_are_versioned_per_kind(data_dir: Path) -> None:
    path = actor_path(data_dir, "chat", "x")
    ActorFile.open(path, "chat", "x", kind_migrations=[V1, V2]).close()
    rows = read_only(path, "SELECT component, version FROM roost_migrations ORDER BY component, version")
    assert rows == [
        ("kind:chat", 1),
        ("kind:chat", 2),
        *(("roost", v) for v in range(1, len(FRAMEWORK_MIGRATIONS) + 1)),
    ]


# -- directory -------------------------------------------------------------------------------------------


def test_register_is_committed_at_once_and_idempotent(directory: Directory) -> None:
    directory.register("counter", "x", "d1", 100.0)
    directory.register("counter", "x", "d2", 200.0)
    assert directory.count() == 1
    entry = directory.get("counter", "x")
    assert entry is not None
    assert (entry.digest, entry.created_at, entry.last_active_at) == ("d1", 100.0, 100.0)
    assert entry.next_alarm_at is None
    # visible to another connection (another process) while this one is still open
    assert read_only(directory.path, "SELECT kind, name FROM actors") == [("counter", "x")]


def test_get_of_an_unknown_actor_is_none(directory: Directory) -> None:
    directory.register("counter", "x", "d", 1.0)
    assert directory.get("counter", "y") is None
    assert directory.get("chat", "x") is None


def test_list_orders_by_kind_then_name_and_filters_by_kind(directory: Directory) -> None:
    for kind, name in [("counter", "b"), ("chat", "z"), ("counter", "a"), ("chat", "a"), ("counter", "B")]:
        directory.register(kind, name, actor_digest(kind, name), 1.0)
    assert [(e.kind, e.name) for e in directory.list()] == [
        ("chat", "a"),
        ("chat", "z"),
        ("counter", "B"),
        ("counter", "a"),
        ("counter", "b"),
    ]
    assert [e.name for e in directory.list("counter")] == ["B", "a", "b"]
    assert directory.list("nothing") == []
    assert directory.count() == 5


def test_list_pages_with_limit_and_offset(directory: Directory) -> None:
    names = [f"n{i:02d}" for i in range(7)]
    for name in reversed(names):
        directory.register("counter", name, actor_digest("counter", name), 1.0)
    directory.register("chat", "room", actor_digest("chat", "room"), 1.0)
    pages = [directory.list("counter", limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [[e.name for e in page] for page in pages] == [names[0:3], names[3:6], names[6:7], []]
    everything = [(e.kind, e.name) for e in directory.list(limit=2, offset=1)]
    assert everything == [("counter", "n00"), ("counter", "n01")]


def test_touch_and_flush_update_last_active_and_never_move_it_back(directory: Directory) -> None:
    directory.register("counter", "x", "d", 100.0)
    directory.register("counter", "y", "d", 100.0)
    directory.touch("counter", "x", 200.0)
    directory.touch("counter", "y", 300.0)
    assert directory.flush() == 2
    x, y = directory.get("counter", "x"), directory.get("counter", "y")
    assert x is not None
    assert y is not None
    assert (x.last_active_at, x.created_at) == (200.0, 100.0)
    assert y.last_active_at == 300.0

    directory.touch("counter", "x", 150.0)
    assert directory.flush() == 1
    x = directory.get("counter", "x")
    assert x is not None
    assert x.last_active_at == 200.0
    assert directory.flush() == 0


def test_directory_is_shared_by_every_instance_on_the_data_dir(data_dir: Path) -> None:
    first, second = Directory(data_dir), Directory(data_dir)
    try:
        first.register("counter", "a", "d", 1.0)
        second.register("counter", "b", "d", 1.0)
        second.touch("counter", "a", 7.0)
        second.flush()
        assert [(e.name, e.last_active_at) for e in first.list()] == [("a", 7.0), ("b", 1.0)]
        assert second.count() == 2
    finally:
        first.close()
        second.close()


def test_touch_of_an_unregistered_actor_creates_nothing(directory: Directory) -> None:
    directory.touch("counter", "ghost", 5.0)
    directory.flush()
    assert directory.count() == 0
    assert directory.get("counter", "ghost") is None


def test_close_flushes_queued_touches(data_dir: Path) -> None:
    d = Directory(data_dir)
    d.register("counter", "x", "d", 100.0)
    d.touch("counter", "x", 500.0)
    d.close()
    d.close()  # idempotent
    reopened = Directory(data_dir)
    try:
        entry = reopened.get("counter", "x")
        assert entry is not None
        assert entry.last_active_at == 500.0
        assert reopened.count() == 1
    finally:
        reopened.close()


@pytest.mark.parametrize("name", ["a\x00b", "\x00", "日本語/🦜", "e\u0301", "..", "x" * MAX_NAME_CHARS])
def test_any_valid_name_round_trips_through_the_directory(directory: Directory, name: str) -> None:
    directory.register("counter", name, actor_digest("counter", name), 1.0)
    directory.register("counter", name + "\x00", actor_digest("counter", name + "\x00"), 1.0)
    entry = directory.get("counter", name)
    assert entry is not None
    assert entry.name == name
    assert entry.digest == actor_digest("counter", name)
    assert [e.name for e in directory.list("counter")] == [name, name + "\x00"]
    directory.touch("counter", name, 9.0)
    directory.flush()
    entry = directory.get("counter", name)
    assert entry is not None
    assert entry.last_active_at == 9.0
    other = directory.get("counter", name + "\x00")
    assert other is not None
    assert other.last_active_at == 1.0


def test_a_directory_that_does_not_wait_refuses_at_once_and_keeps_its_touches(data_dir: Path) -> None:
    """``Directory(waits=False)`` never waits for another holder of the write lock: a write raises
    ``DirectoryBusy``, a flush writes nothing and keeps its touches queued (merged with newer ones)
    for the next flush, and the high-water seq only ever rises."""
    directory = Directory(data_dir, waits=False)
    other = sqlite3.connect(data_dir / "directory.sqlite", isolation_level=None, timeout=10)
    try:
        directory.register("counter", "c1", "d", 1.0)
        directory.touch("counter", "c1", 2.0, 7)
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DirectoryBusy):
            directory.register("counter", "c2", "d", 1.0)
        assert directory.flush() == 0
        directory.touch("counter", "c1", 3.0, 5)  # newer time, an older seq: the seq stays 7
        assert (directory.pending, directory.busy) == (1, 2)
        other.execute("ROLLBACK")
        assert directory.flush() == 1
        entry = directory.get("counter", "c1")
        assert entry is not None
        assert (entry.last_active_at, entry.acked_seq) == (3.0, 7)
        directory.touch("counter", "c1", 4.0, 3)
        directory.flush()
        assert directory.get("counter", "c1").acked_seq == 7  # type: ignore[union-attr]
        assert directory.get("counter", "c2") is None
    finally:
        other.close()
        directory.close()


def test_a_touch_for_a_deleted_actor_never_lands_on_a_new_actor_of_the_same_name(data_dir: Path) -> None:
    """A process that queued a touch (with the old actor's high-water seq) before another process
    deleted and re-created the name must not give the new actor that seq: it would be refused as
    damaged. The touch names its row by ``created_at``."""
    serving = Directory(data_dir, waits=False)
    other = Directory(data_dir)
    try:
        serving.register("counter", "c1", "d", 1.0)
        serving.touch("counter", "c1", 5.0, 300, created_at=1.0)  # queued, not yet flushed
        assert other.forget("counter", "c1")  # roost delete …
        other.register("counter", "c1", "d", 2.0)  # … and a new actor of that name
        serving.flush()
        entry = other.get("counter", "c1")
        assert entry is not None
        assert (entry.created_at, entry.acked_seq) == (2.0, 0)
        serving.touch("counter", "c1", 6.0, 4, created_at=2.0)
        serving.flush()
        assert other.get("counter", "c1").acked_seq == 4  # type: ignore[union-attr]
    finally:
        other.close()
        serving.close()

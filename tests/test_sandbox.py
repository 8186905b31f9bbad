"""The sandbox backend (roost.agent.sandbox) on real directories: manifests and their digests, path
resolution (escapes refused), the permissions profile, limits, snapshots and their restore."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roost.agent.payloads import BlobStore
from roost.agent.sandbox import (
    AccessDenied,
    DigestMismatch,
    LimitExceeded,
    Limits,
    Manifest,
    ManifestEntry,
    PathRefused,
    PermissionsProfile,
    SandboxError,
    Workspace,
    digest_of,
    load_snapshot,
    snapshot,
)

FILES = {"README.md": "hello\n", "src/main.py": "print('hi')\n", "notes/log.txt": ""}


def make(
    tmp_path: Path, profile: PermissionsProfile | None = None, limits: Limits | None = None
) -> Workspace:
    return Workspace(
        tmp_path / "ws", profile or PermissionsProfile(), limits or Limits(), BlobStore(tmp_path / "blobs")
    )


def test_materialise_writes_the_manifest_and_returns_its_entries(tmp_path: Path) -> None:
    ws = make(tmp_path)
    entries = ws.materialise(Manifest.of("v1", FILES))
    assert entries == {p: [digest_of(t.encode()), len(t.encode())] for p, t in FILES.items()}
    assert (tmp_path / "ws" / "src" / "main.py").read_text() == FILES["src/main.py"]
    assert ws.scan() == (entries, [])


def test_a_manifest_entry_with_a_bad_digest_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    bad = Manifest(
        version="v1",
        entries=(
            ManifestEntry(path="a.txt", content="a", digest=digest_of(b"a")),
            ManifestEntry(path="b.txt", content="b", digest=digest_of(b"not b")),
        ),
    )
    ws = make(tmp_path)
    with pytest.raises(DigestMismatch, match=r"b\.txt"):
        ws.materialise(bad)
    assert not (tmp_path / "ws").exists()


def test_symlinks_in_a_manifest_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="symlinks are not allowed"):
        ManifestEntry(path="l", kind="symlink", content="/etc/passwd", digest=digest_of(b"/etc/passwd"))


@pytest.mark.parametrize(
    "path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd", "./a", "a//b", "", "a\\b", "a\0b"]
)
def test_escapes_and_odd_paths_are_refused(tmp_path: Path, path: str) -> None:
    ws = make(tmp_path)
    ws.materialise(Manifest.of("v1", FILES))
    with pytest.raises(PathRefused):
        ws.write(path, "x")
    with pytest.raises(PathRefused):
        ws.read(path)
    assert not (tmp_path / "outside.txt").exists()


def test_a_symlink_inside_the_workspace_pointing_out_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    ws = make(tmp_path)
    ws.materialise(Manifest.of("v1", FILES))
    os.symlink(outside / "secret.txt", tmp_path / "ws" / "link.txt")
    os.symlink(outside, tmp_path / "ws" / "linkdir")
    with pytest.raises(PathRefused, match="symlink"):
        ws.read("link.txt")
    with pytest.raises(PathRefused, match="symlink"):
        ws.read("linkdir/secret.txt")
    with pytest.raises(PathRefused, match="symlink"):
        ws.write("linkdir/new.txt", "x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    # writing the link's own name replaces the link, never its target
    ws.write("link.txt", "mine")
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (tmp_path / "ws" / "link.txt").is_symlink()
    assert ws.read("link.txt") == b"mine"


def test_a_directory_swapped_for_a_symlink_after_materialisation_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = make(tmp_path)
    ws.materialise(Manifest.of("v1", FILES))
    src = tmp_path / "ws" / "src"
    for f in src.iterdir():
        f.unlink()
    src.rmdir()
    os.symlink(outside, src)  # swapped in after the workspace was made
    with pytest.raises(PathRefused, match="symlink"):
        ws.write("src/main.py", "evil")
    with pytest.raises(PathRefused, match="symlink"):
        ws.read("src/main.py")
    assert list(outside.iterdir()) == []
    # the scan does not follow it either, and reports it as not a file
    entries, odd = ws.scan()
    assert "src" in odd
    assert not any(p.startswith("src/") for p in entries)


def test_the_profile_allows_and_refuses_reads_and_writes(tmp_path: Path) -> None:
    profile = PermissionsProfile("docs", read_only=("src", "README.md"), read_write=("notes",))
    ws = make(tmp_path, profile)
    ws.materialise(Manifest.of("v1", {**FILES, "private/key.txt": "k"}))
    assert ws.read("src/main.py") == FILES["src/main.py"].encode()
    ws.write("notes/log.txt", "one\n")
    ws.append("notes/log.txt", "two\n")
    assert ws.read("notes/log.txt") == b"one\ntwo\n"
    with pytest.raises(AccessDenied, match="not writable"):
        ws.write("src/main.py", "changed")
    with pytest.raises(AccessDenied, match="not writable"):
        ws.write("README.md", "changed")
    with pytest.raises(AccessDenied, match="not readable"):
        ws.read("private/key.txt")
    with pytest.raises(AccessDenied, match="not writable"):
        ws.delete("src/main.py")
    assert [f["path"] for f in ws.listing()] == ["README.md", "notes/log.txt", "src/main.py"]
    assert (tmp_path / "ws" / "src" / "main.py").read_text() == FILES["src/main.py"]


def test_read_only_wins_over_read_write(tmp_path: Path) -> None:
    profile = PermissionsProfile("mixed", read_only=("out/frozen",), read_write=("out",))
    assert profile.can_write("out/a.txt")
    assert not profile.can_write("out/frozen/a.txt")
    assert profile.can_read("out/frozen/a.txt")
    assert not profile.can_read("outside/a.txt")
    assert not profile.can_write("outer.txt")  # a prefix is a whole component


def test_limits_are_enforced_with_clear_errors(tmp_path: Path) -> None:
    limits = Limits(max_entries=3, max_file_bytes=10, max_total_bytes=25, max_path_chars=20, max_depth=3)
    ws = make(tmp_path, limits=limits)
    with pytest.raises(LimitExceeded, match="more than 3"):
        ws.materialise(Manifest.of("v1", {f"f{i}": "" for i in range(4)}))
    with pytest.raises(LimitExceeded, match="more than 10 bytes"):
        ws.materialise(Manifest.of("v1", {"big": "x" * 11}))
    ws.materialise(Manifest.of("v1", {"a": "x" * 10}))
    with pytest.raises(LimitExceeded, match="per file"):
        ws.write("b", "y" * 11)
    ws.write("b", "y" * 10)
    with pytest.raises(LimitExceeded, match="more than 25"):
        ws.write("c", "z" * 10)
    with pytest.raises(LimitExceeded, match="longer than 20"):
        ws.write("x" * 21, "")
    with pytest.raises(LimitExceeded, match="deeper than 3"):
        ws.write("a1/b/c/d", "")


def test_snapshot_and_restore_round_trip(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    ws = make(tmp_path)
    manifest = Manifest.of("v1", FILES)
    ws.materialise(manifest)
    ws.write("notes/log.txt", "one\n")
    ws.write("out/report.md", "# report\n")
    entries, _ = ws.scan()
    snap = snapshot(blobs, manifest.ref(blobs), entries)
    ws.write("notes/log.txt", "changed\n")
    ws.delete("README.md")
    ws.write("junk.txt", "junk")
    restored = ws.restore(load_snapshot(blobs, snap))
    assert restored == sorted(entries)
    assert ws.scan() == (entries, [])
    assert ws.read("notes/log.txt") == b"one\n"
    assert not (tmp_path / "ws" / "junk.txt").exists()


def test_a_snapshot_whose_blob_was_tampered_with_is_refused(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    ws = make(tmp_path)
    entries = ws.materialise(Manifest.of("v1", {"a.txt": "original"}))
    blobs.path(entries["a.txt"][0][7:]).write_bytes(b"tampered")
    with pytest.raises(DigestMismatch, match=r"a\.txt"):
        ws.restore(entries)


def test_reconcile_keeps_what_matches_and_puts_back_the_rest(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    ws = make(tmp_path)
    entries = ws.materialise(Manifest.of("v1", FILES))
    root = tmp_path / "ws"
    (root / "notes" / "log.txt").write_text("a pending write\n")
    (root / "README.md").unlink()
    (root / "extra").mkdir()
    (root / "extra" / "new.txt").write_text("new")
    os.symlink(outside, root / "link")
    (root / "src" / "main.py").unlink()
    (root / "src" / "main.py").mkdir()  # a directory where a file belongs
    (root / "src" / "main.py" / "inner.txt").write_text("inner")
    done = ws.reconcile(entries)
    assert done.kept == []
    assert done.reverted == ["notes/log.txt"]
    assert done.restored == ["README.md", "src/main.py"]
    assert set(done.removed) >= {"extra/new.txt", "link", "src/main.py"}
    assert ws.scan() == (entries, [])
    assert not (root / "extra").exists()
    assert outside.read_text() == "outside"


@given(
    st.lists(st.sampled_from(["..", ".", "", "a", "b.txt", "link", "linkdir", "/", "\\", "x\0"]), max_size=6)
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_path_of_any_shape_writes_outside_the_workspace(tmp_path: Path, names: list[str]) -> None:
    """Whatever a path is made of (``..``, ``.``, empty parts, slashes, symlinks to a file and to a
    directory outside), a write either is refused or lands on a regular file inside the root."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "victim.txt").write_text("untouched")
    ws = make(tmp_path)
    ws.materialise(Manifest.of("v1", {"a/b.txt": "x"}))
    root = tmp_path / "ws"
    os.symlink(outside / "victim.txt", root / "link")
    os.symlink(outside, root / "linkdir")
    path = "/".join(names)
    try:
        ws.write(path, "written")
    except (PathRefused, LimitExceeded, SandboxError):
        pass
    else:
        target = root / path
        assert target.resolve().is_relative_to(root.resolve())
        assert not target.is_symlink()
        assert target.read_text() == "written"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "untouched"

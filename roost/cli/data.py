"""``roost inspect | export | delete | backup | gc``: the data tools (:mod:`roost.transport.admin`,
:mod:`roost.transport.backup`, :mod:`roost.transport.collect`), with clear refusals. They open actor
files directly, so an actor live in a running server is refused (its file is locked); with ``--server
URL`` they ask the server instead: ``inspect`` and ``export`` read the actor inside one of its turns
(``GET /admin/actors/…``), ``delete`` stops it there and deletes it (``DELETE /admin/actors/…``),
``backup`` copies while serving (``POST /admin/backup``), ``gc`` collects the blob store while
serving (``POST /admin/gc``). Every hint
names only options the command has. ``$ROOST_TOKEN`` (a token with the admin claim) authenticates to
a server that asks for one."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from roost.cli.errors import CommandFailed, UsageError
from roost.cli.options import add_data_option, non_negative_float
from roost.storage import ActorLocked, InvalidActorAddress

__all__ = ["add_parsers"]


def _print_json(value: object) -> None:
    sys.stdout.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
    )


def _data_ops(args: argparse.Namespace) -> int:
    from roost.transport import admin, backup, collect

    data = Path(args.data)
    if args.command == "inspect" and (args.kind is None) != (args.name is None):
        raise UsageError("inspect takes KIND and NAME together, or neither (the whole data directory)")
    if args.server:
        return _online(args)
    if not (data / "directory.sqlite").exists():
        raise CommandFailed(f"no data directory at {data}")
    if getattr(args, "tenant", None) and getattr(args, "name", None):
        args.name = f"{args.tenant}\x00{args.name}"  # a tenant's actor (see roost.transport.security)
    try:
        if args.command == "inspect":
            if args.kind is None:
                _print_json(admin.inspect_directory(data))
            else:
                _print_json(admin.inspect_actor(data, args.kind, args.name))
        elif args.command == "export":
            exported = admin.export_actor(data, args.kind, args.name)
            if args.out:
                Path(args.out).write_bytes(orjson.dumps(exported, option=orjson.OPT_INDENT_2))
                print(f"exported {args.kind}/{args.name!r} to {args.out}")
            else:
                _print_json(exported)
        elif args.command == "delete":
            if not args.yes:
                raise UsageError(f"deleting {args.kind}/{args.name!r} cannot be undone; add --yes")
            record = admin.delete_actor(data, args.kind, args.name, reason=args.reason or "")
            print(f"deleted {args.kind}/{args.name!r}; audit record in {data / admin.AUDIT_LOG}; {_GC_HINT}")
            _print_json(record)
        elif args.command == "backup":
            return _backed_up(backup.backup_offline(data, Path(args.out)), args.out, "")
        elif args.command == "gc":
            try:
                return _collected(collect.collect_offline(data, grace=args.grace, dry_run=args.dry_run))
            except collect.CollectionRefused as exc:
                raise CommandFailed(str(exc)) from None
    except InvalidActorAddress as exc:
        raise UsageError(str(exc)) from None
    except ActorLocked as exc:
        raise CommandFailed(f"{exc}: a running server holds it ({_LOCKED_HINTS[args.command]})") from None
    except FileNotFoundError as exc:
        raise CommandFailed(str(exc)) from None
    except FileExistsError as exc:
        raise CommandFailed(f"{exc}: a backup goes into a new directory") from None
    except sqlite3.DatabaseError as exc:  # a damaged actor file (inspect and delete report it)
        raise CommandFailed(
            f"an actor file is damaged: {exc} (roost inspect --data DIR lists damaged actors, "
            "roost inspect KIND NAME says why, roost delete clears one)"
        ) from None
    return 0


_LOCKED_HINTS = {
    "inspect": "use --server URL to read it while serving",
    "export": "use --server URL to read it while serving",
    "delete": "use --server URL to delete it through the server",
    "backup": "use --server URL to back up while serving",
    "gc": "nothing was removed; use --server URL to collect while serving",
}
_GC_HINT = "its blobs that no other actor references go at the next roost gc"


def _backed_up(manifest: dict[str, Any], where: str, serving: str) -> int:
    print(
        f"backed up {manifest['actors']} actor(s) and {manifest['blobs']} blob(s) to {where}{serving}; "
        f"integrity failures: {manifest['integrity_failures']}; blobs missing: {manifest['blobs_missing']}"
    )
    return 0 if manifest["integrity_failures"] == 0 and manifest["blobs_missing"] == 0 else 1


def _collected(report: dict[str, Any]) -> int:
    verb = "would remove" if report["dry_run"] else "removed"
    print(
        f"{verb} {report['removed']} blob(s) ({report['removed_bytes']} bytes); kept {report['kept']} "
        f"referenced and {report['young']} stored in the last {report['grace']:g} s; "
        f"references to missing blobs: {report['missing']}"
    )
    _print_json(report)
    return 0


def _online(args: argparse.Namespace) -> int:
    """The command, asked of the server at ``--server``."""
    if args.command == "backup":
        manifest = _ask(args, "POST", "/admin/backup", {"name": args.out})
        return _backed_up(manifest, manifest["path"], " while serving")
    if args.command == "gc":
        return _collected(_ask(args, "POST", "/admin/gc", {"grace": args.grace, "dry_run": args.dry_run}))
    if args.kind is None:
        raise UsageError("inspect --server takes KIND and NAME (a whole data directory is inspected offline)")
    path = f"/admin/actors/{quote(args.kind, safe='')}/{quote(args.name, safe='')}"
    if args.command == "delete":
        if not args.yes:
            raise UsageError(f"deleting {args.kind}/{args.name!r} cannot be undone; add --yes")
        record = _ask(args, "DELETE", path, {"reason": args.reason or ""})
        print(
            f"deleted {args.kind}/{args.name!r} through the server; audit record in its data directory; "
            f"{_GC_HINT}"
        )
        _print_json(record)
    elif args.command == "inspect":
        _print_json(_ask(args, "GET", path))
    else:
        exported = _ask(args, "GET", f"{path}/export")
        if args.out:
            Path(args.out).write_bytes(orjson.dumps(exported, option=orjson.OPT_INDENT_2))
            print(f"exported {args.kind}/{args.name!r} to {args.out} while serving")
        else:
            _print_json(exported)
    return 0


def _ask(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """The ``result`` of an admin request to the server at ``--server``; ``CommandFailed`` with the
    server's message when it refuses or fails, or does not answer."""
    import httpx

    token = os.environ.get("ROOST_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {"tenant": args.tenant} if getattr(args, "tenant", None) else None
    url = f"{args.server.rstrip('/')}{path}"
    try:
        r = httpx.request(method, url, json=body, params=params, headers=headers, timeout=3600)
    except httpx.InvalidURL as exc:
        raise UsageError(f"--server {args.server!r}: {exc}") from None
    except httpx.HTTPError as exc:
        raise CommandFailed(f"{args.command} failed: no answer from {args.server}: {exc}") from None
    try:
        answer = r.json()
    except ValueError:  # not our JSON (a proxy's page, say)
        answer = {"ok": False, "error": {"message": r.text[:200]}}
    if not isinstance(answer, dict) or not answer.get("ok"):
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        raise CommandFailed(f"{args.command} failed (HTTP {r.status_code}): {message}")
    return answer["result"]


def _actor_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    command: str,
    help: str,
    *,
    optional: bool = False,
) -> argparse.ArgumentParser:
    """A data command about one actor (``kind name``, optional for ``inspect``), its data directory and
    tenant; run by :func:`_data_ops`."""
    parser = sub.add_parser(command, help=help)
    whole = " (default: the whole data directory)" if optional else ""
    parser.add_argument("kind", nargs="?" if optional else None, help=f"the actor's kind{whole}")
    parser.add_argument("name", nargs="?" if optional else None, help=f"the actor's name{whole}")
    add_data_option(parser)
    parser.add_argument("--tenant", help="the actor's tenant (its name is scoped to it; default: none)")
    parser.add_argument(
        "--server",
        help="URL of the running server holding the actor: read it there, inside one of its turns, or "
        "delete it there ($ROOST_TOKEN with the admin claim if it authenticates; default: none, the "
        "files are opened directly)",
    )
    parser.set_defaults(func=_data_ops, command=command)
    return parser


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _actor_command(sub, "inspect", "what a data directory, or one actor, holds (read-only)", optional=True)
    exp = _actor_command(sub, "export", "one actor as JSON: state, tables, events, schedules")
    exp.add_argument("--out", help="file to write (default: stdout)")
    dele = _actor_command(sub, "delete", "delete one actor for good (leaves an audit record)")
    dele.add_argument("--reason", help="why (kept in the audit record; default: none)")
    dele.add_argument("--yes", action="store_true", help="yes, really")
    bak = sub.add_parser("backup", help="SQLite online backup of a data directory into a new directory")
    add_data_option(bak)
    bak.add_argument(
        "--out",
        required=True,
        help="a directory to create; with --server, a name under the server's backup root "
        "($ROOST_BACKUP_DIR, or backups/ beside the server's data directory)",
    )
    bak.add_argument(
        "--server",
        help="URL of the server holding the data (backup while serving; "
        "$ROOST_TOKEN with the admin claim if it authenticates; default: none, an offline copy)",
    )
    bak.set_defaults(func=_data_ops, command="backup")
    gc = sub.add_parser(
        "gc",
        help="remove the blobs (DATA/blobs) no actor's file references any more: those of deleted "
        "actors, of replaced workspace files and snapshots",
    )
    add_data_option(gc)
    gc.add_argument(
        "--grace",
        type=non_negative_float,
        default=3600.0,
        help="seconds a blob stored (or stored again) is kept whatever references it (0: none is; "
        "default: 3600, longer than any turn between storing a blob and committing its reference)",
    )
    gc.add_argument("--dry-run", action="store_true", help="report what would go, remove nothing")
    gc.add_argument(
        "--server",
        help="URL of the server holding the data (collect while serving; "
        "$ROOST_TOKEN with the admin claim if it authenticates; default: none, offline)",
    )
    gc.set_defaults(func=_data_ops, command="gc")

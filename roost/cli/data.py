"""``roost inspect | export | delete | backup``: the data tools (:mod:`roost.transport.admin`), with clear
refusals. They open actor files directly, so an actor live in a running server is refused (its file is
locked); ``backup --server`` asks the server to copy while serving."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

from roost.cli.errors import CommandFailed, UsageError
from roost.storage import ActorLocked, InvalidActorAddress

__all__ = ["add_parsers"]


def _print_json(value: object) -> None:
    sys.stdout.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
    )


def _data_ops(args: argparse.Namespace) -> int:
    from roost.transport import admin

    data = Path(args.data)
    if args.command == "backup" and args.server:
        return _backup_online(args)
    if not (data / "directory.sqlite").exists():
        raise CommandFailed(f"no data directory at {data}")
    if args.command == "inspect" and (args.kind is None) != (args.name is None):
        raise UsageError("inspect takes KIND and NAME together, or neither (the whole data directory)")
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
            print(f"deleted {args.kind}/{args.name!r}; audit record in {data / admin.AUDIT_LOG}")
            _print_json(record)
        elif args.command == "backup":
            manifest = admin.backup_offline(data, Path(args.out))
            print(
                f"backed up {manifest['actors']} actor(s) to {args.out}; integrity failures: "
                f"{manifest['integrity_failures']}"
            )
            return 0 if manifest["integrity_failures"] == 0 else 1
    except InvalidActorAddress as exc:
        raise UsageError(str(exc)) from None
    except ActorLocked as exc:
        hint = (
            "use --server to back up while serving" if args.command == "backup" else "stop the server first"
        )
        raise CommandFailed(f"{exc}: a running server holds it ({hint})") from None
    except FileNotFoundError as exc:
        raise CommandFailed(str(exc)) from None
    except FileExistsError as exc:
        raise CommandFailed(f"{exc}: a backup goes into a new directory") from None
    return 0


def _backup_online(args: argparse.Namespace) -> int:
    import httpx

    token = os.environ.get("ROOST_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{args.server.rstrip('/')}/admin/backup"
    try:
        r = httpx.post(url, json={"name": args.out}, headers=headers, timeout=3600)
    except httpx.InvalidURL as exc:
        raise UsageError(f"--server {args.server!r}: {exc}") from None
    except httpx.HTTPError as exc:
        raise CommandFailed(f"backup failed: no answer from {args.server}: {exc}") from None
    try:
        body = r.json()
    except ValueError:  # not our JSON (a proxy's page, say)
        body = {"ok": False, "error": {"message": r.text[:200]}}
    if not body.get("ok"):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        raise CommandFailed(f"backup failed (HTTP {r.status_code}): {message}")
    manifest = body["result"]
    print(
        f"backed up {manifest['actors']} actor(s) to {manifest['path']} while serving; integrity failures: "
        f"{manifest['integrity_failures']}"
    )
    return 0 if manifest["integrity_failures"] == 0 else 1


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
    parser.add_argument("kind", nargs="?" if optional else None, help="the actor's kind")
    parser.add_argument("name", nargs="?" if optional else None, help="the actor's name")
    parser.add_argument("--data", default="data", help="data directory")
    parser.add_argument("--tenant", help="the actor's tenant (its name is scoped to it)")
    parser.set_defaults(func=_data_ops, command=command)
    return parser


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _actor_command(sub, "inspect", "what a data directory, or one actor, holds (read-only)", optional=True)
    exp = _actor_command(sub, "export", "one actor as JSON: state, tables, events, schedules")
    exp.add_argument("--out", help="file to write (default: stdout)")
    dele = _actor_command(sub, "delete", "delete one actor for good (leaves an audit record)")
    dele.add_argument("--reason", help="why (kept in the audit record)")
    dele.add_argument("--yes", action="store_true", help="yes, really")
    bak = sub.add_parser("backup", help="SQLite online backup of a data directory into a new directory")
    bak.add_argument("--data", default="data", help="data directory")
    bak.add_argument(
        "--out",
        required=True,
        help="a directory to create; with --server, a name under the server's backup root "
        "($ROOST_BACKUP_DIR, or backups/ beside the server's data directory)",
    )
    bak.add_argument(
        "--server",
        help="URL of the server holding the data (backup while serving; "
        "$ROOST_TOKEN with the admin claim if it authenticates)",
    )
    bak.set_defaults(func=_data_ops, command="backup")

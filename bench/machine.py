"""Machine information for RESULTS.md: CPU, cores, memory, kernel, Python, SQLite, package versions."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import time
from importlib import metadata
from pathlib import Path

__all__ = ["PACKAGES", "machine_info"]

PACKAGES = ("starlette", "uvicorn", "websockets", "uvloop", "httptools", "orjson", "pydantic", "aiosqlite")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _filesystem(path: Path) -> str:
    try:
        out = subprocess.run(
            ["df", "--output=source,fstype", str(path)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.split("\n")
        return " ".join(out[1].split()) if len(out) > 1 else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine_info(data_dir: Path) -> dict[str, str]:
    versions = []
    for pkg in PACKAGES:
        try:
            versions.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{pkg} -")
    try:
        soft_fds = subprocess.run(
            ["sh", "-c", "ulimit -n"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        soft_fds = "?"
    return {
        "cpu": f"{_cpu_model()} × {os.cpu_count()} logical CPUs",
        "memory": f"{_mem_mib():,} MiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "sqlite": sqlite3.sqlite_version,
        "packages": ", ".join(versions),
        "data_dir": f"{data_dir} ({_filesystem(data_dir)})",
        "ulimit_n": soft_fds,
        "loadavg_at_start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }

"""The ``docs`` agent: the seed's document analysis, over sample documents shipped with it.

``"analyze the documents and make a report"`` plans three steps:

1. ``collect_documents`` (safe, inline): list the documents with their size and digest;
2. ``analyze_documents`` (safe, background, heavy): read each one, with progress; slow on purpose
   (``[agent.tools.analyze_documents] delay_s``, default 0.4 s per document);
3. ``generate_report`` (mutating, needs approval): write ``reports/<agent>/<run_id>.md`` under the
   data directory. Writing is idempotent: the same run writes the same bytes to the same path, and an
   existing identical file is not written again.

The run is verified by :meth:`DocsAgent.verify`: the report exists, its digest is the one the step
recorded, and it names every collected document. The evidence is the file and its digest.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost.agent import Agent, ToolContext, Verdict, tool
from roost.agent.store import Row

__all__ = ["SAMPLE_DOCS", "DocsAgent", "analyze_documents", "collect_documents", "generate_report"]

SAMPLE_DOCS = Path(__file__).with_name("sample_docs")
_WORD = re.compile(r"[a-z]{4,}")
_STOP = frozenset("this that with from have every their they them into after before about which when".split())


def _docs_dir(ctx: ToolContext) -> Path:
    return Path(ctx.settings.get("docs_dir", SAMPLE_DOCS))


def report_path(data_dir: Path, agent: str, run_id: str) -> Path:
    folder = hashlib.blake2b(agent.encode(), digest_size=8).hexdigest()
    return data_dir / "reports" / folder / f"{run_id}.md"


class CollectArgs(BaseModel):
    pattern: str = Field("*.md", max_length=64)


class AnalyzeArgs(BaseModel):
    top_terms: int = Field(5, ge=1, le=20)


class ReportArgs(BaseModel):
    format: Literal["markdown"] = "markdown"
    title: str = Field("Document analysis", min_length=1, max_length=120)


@tool(keywords=("document", "docs", "files", "collect"), settings=("docs_dir",))
async def collect_documents(ctx: ToolContext, args: CollectArgs) -> dict[str, Any]:
    """List the documents of the project (name, size, digest)."""
    found = []
    for path in sorted(_docs_dir(ctx).glob(args.pattern)):
        data = path.read_bytes()
        found.append({"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"summary": f"{len(found)} documents found", "count": len(found), "documents": found}


@tool(
    background=True,
    heavy=True,
    keywords=("analy", "summar", "review"),
    requires=("collect_documents",),
    settings=("delay_s", "docs_dir"),
)
async def analyze_documents(ctx: ToolContext, args: AnalyzeArgs) -> dict[str, Any]:
    """Read every collected document: title, words, first sentence, top terms (slow, with progress)."""
    names = [d["name"] for d in ctx.results.get("collect_documents", {}).get("documents", [])]
    delay = float(ctx.settings.get("delay_s", 0.4))
    folder = _docs_dir(ctx)
    # a retried attempt goes on from what the previous one saved with its progress
    out: list[dict[str, Any]] = list((ctx.checkpoint or {}).get("analysed", []))
    start = len(out)
    await ctx.progress(start, len(names), "resuming" if start else "starting")
    for i, name in enumerate(names[start:], start):
        text = (folder / name).read_text()
        await ctx.sleep(delay)
        lines = [line for line in text.splitlines() if line.strip()]
        body = " ".join(line for line in lines if not line.startswith("#"))
        words = _WORD.findall(body.lower())
        out.append(
            {
                "name": name,
                "title": lines[0].lstrip("# ").strip() if lines else name,
                "words": len(body.split()),
                "first_sentence": body.split(". ")[0].strip().rstrip(".") + ".",
                "top_terms": [
                    w for w, _ in Counter(w for w in words if w not in _STOP).most_common(args.top_terms)
                ],
            }
        )
        await ctx.progress(i + 1, len(names), f"analysed {name}", checkpoint={"analysed": out})
    return {"summary": f"{len(out)} documents analysed", "count": len(out), "documents": out}


def _report_args(text: str) -> dict[str, Any]:
    """``… titled Quarterly review`` sets the title."""
    found = re.search(r"\btitled\s+[\"']?([^\"'\n]{1,120}?)[\"']?\s*$", text)
    return {"title": found.group(1).strip()} if found else {}


@tool(approval_mode="mutating", keywords=("report",), requires=("analyze_documents",), plan_args=_report_args)
async def generate_report(ctx: ToolContext, args: ReportArgs) -> dict[str, Any]:
    """Write the analysis as a report file (changes the project: needs approval)."""
    analysis = ctx.results.get("analyze_documents", {}).get("documents", [])
    lines = [f"# {args.title}", "", f"Run `{ctx.run_id}` · {len(analysis)} documents", ""]
    for doc in analysis:
        lines += [
            f"## {doc['title']} (`{doc['name']}`)",
            "",
            f"{doc['first_sentence']} ({doc['words']} words; terms: {', '.join(doc['top_terms'])})",
            "",
        ]
    data = "\n".join(lines).encode()
    path = report_path(ctx.data_dir, ctx.agent, ctx.run_id)
    digest = hashlib.sha256(data).hexdigest()
    written = False
    if not (path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == digest):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        written = True
    rel = str(path.relative_to(ctx.data_dir))
    return {
        "summary": f"report written to {rel}",
        "path": rel,
        "sha256": digest,
        "bytes": len(data),
        "documents": len(analysis),
        "written": written,
    }


class DocsAgent(Agent):
    """Analyses the project's documents and writes a report, after approval."""

    kind = "docs"
    tools = (collect_documents, analyze_documents, generate_report)
    stop_condition = "the report file exists, matches its recorded digest and names every collected document"
    profile = {"agent": "docs", "description": "analyses documents and writes a report"}

    async def verify(self, run: Row, items: list[Row]) -> Verdict:
        results = {i["tool_name"]: i["result"] for i in items if i["status"] == "completed"}
        if "generate_report" not in results:
            return await super().verify(run, items)
        report = results["generate_report"]
        data_dir = self.extension.process.data_dir
        path = data_dir / report["path"]
        if not path.is_file():
            return Verdict("fail", "docs.report_gate", [], f"report {report['path']} does not exist")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        evidence = [f"file:{report['path']}", f"sha256:{digest}"]
        if digest != report["sha256"]:
            return Verdict("fail", "docs.report_gate", evidence, "the report changed after it was written")
        names = [d["name"] for d in results.get("collect_documents", {}).get("documents", [])]
        missing = [n for n in names if n not in data.decode()]
        if missing:
            return Verdict("fail", "docs.report_gate", evidence, f"the report misses {', '.join(missing)}")
        return Verdict("pass", "docs.report_gate", evidence, f"the report covers all {len(names)} documents")

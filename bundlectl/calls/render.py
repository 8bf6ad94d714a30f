"""Printing a CallToolResult: text as is, media saved to files, resources with URI and type."""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any

from bundlectl.mcpio.session import ToolResult
from bundlectl.output import note, pretty_json

TEXT_LIMIT = 1_000_000
# Types the platform's mimetypes table often lacks.
_EXTENSIONS = {
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "image/webp": ".webp",
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "application/octet-stream": ".bin",
}  # characters of one text block in text mode; --format json keeps all


def result_json(result: ToolResult) -> dict[str, Any]:
    """The result as MCP JSON."""
    return result.data


class OutputDir:
    """Where images, audio and blobs go: --output-dir, or a temp folder made on first use."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.count = 0

    def save(self, data: bytes, mime: str | None, stem: str) -> Path:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="bundlectl-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count += 1
        import mimetypes  # noqa: PLC0415 - only when a result holds a file (~2 ms a command)

        suffix = _EXTENSIONS.get(mime or "") or mimetypes.guess_extension(mime or "") or ".bin"
        path = self.folder / f"{stem}-{self.count}{suffix}"
        path.write_bytes(data)
        return path


def _truncate(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    cut = len(text) - TEXT_LIMIT
    note(
        f"output cut after {TEXT_LIMIT:,} characters ({cut:,} more); "
        "use --format json for everything"
    )
    return text[:TEXT_LIMIT]


def render_text(result: ToolResult, outdir: OutputDir, stem: str) -> list[str]:
    """Lines for the terminal; error results are rendered the same (the caller routes them)."""
    lines: list[str] = []
    structured = result.structured_content
    for block in result.content:
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            if structured is not None and _same_json(text, structured):
                continue  # the text form of the structured result: print it once, as JSON
            lines.append(_truncate(text))
        elif kind in ("image", "audio"):
            mime = block.get("mimeType")
            data = base64.b64decode(block.get("data", ""))
            path = outdir.save(data, mime, stem)
            lines.append(f"[{kind}: {path} ({mime}, {len(data):,} bytes)]")
        elif kind == "resource_link":
            mime = f", {block['mimeType']}" if block.get("mimeType") else ""
            lines.append(f"[resource link: {block.get('uri')} ({block.get('name')}{mime})]")
        elif kind == "resource":
            lines += _resource(block.get("resource") or {}, outdir, stem)
        else:
            lines.append(f"[{kind} content]")
    texts = result.texts()
    wrapped = (
        isinstance(structured, dict)
        and list(structured) == ["result"]
        and "".join(texts) == structured["result"]
    )
    if structured is not None and not wrapped:  # {"result": text} only repeats the text
        lines.append(pretty_json(structured))
    return lines


def _resource(resource: dict[str, Any], outdir: OutputDir, stem: str) -> list[str]:
    """An embedded resource: its text, or its blob saved to a file."""
    uri, mime = resource.get("uri"), resource.get("mimeType")
    shown = mime or "unknown type"
    if resource.get("text") is not None:
        return [f"[resource: {uri} ({shown})]", _truncate(str(resource["text"]))]
    data = base64.b64decode(resource.get("blob", ""))
    path = outdir.save(data, mime, stem)
    return [f"[resource: {uri} ({shown}, {len(data):,} bytes) saved to {path}]"]


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except (json.JSONDecodeError, TypeError):
        return False

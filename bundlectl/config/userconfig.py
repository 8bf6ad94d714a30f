"""The user's own settings: `config.yaml` in the platformdirs config dir (or BUNDLECTL_HOME)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bundlectl.config import paths
from bundlectl.config.validation import validate_doc
from bundlectl.config.yamlio import read_yaml


class AuditSettings(BaseModel):
    """Where `exec` writes its audit records."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(
        default=None, description="The audit log file (default: the user state dir)."
    )
    max_mb: float = Field(
        default=100,
        gt=0,
        description="Rotate the log when a record would take it past this size (MB): it is "
        "renamed `NAME.1` (earlier ones shift up) and the new log starts with a record that "
        "links to the last one of the old.",
    )
    keep: int = Field(default=5, ge=1, le=1000, description="Rotated logs kept (`NAME.1`...).")
    sinks: list[Literal["file", "stdout", "stderr", "otlp"]] = Field(
        default=["file"],
        min_length=1,
        description="Where each record goes: the log file, and/or stdout or stderr as JSON "
        "lines (for containers; `serve` over stdio refuses stdout, its MCP channel), and/or "
        "otlp: OpenTelemetry log records over OTLP (bundlectl[otel]; OTEL_EXPORTER_OTLP_* "
        "say where).",
    )


class UserConfig(BaseModel):
    """`config.yaml`: settings of one user, for every project."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit: AuditSettings = Field(default_factory=AuditSettings, description="Audit log settings.")


def load() -> UserConfig:
    """The user config, or the defaults when there is none (an invalid one is exit 2)."""
    path = paths.user_config_file()
    if not path.is_file():
        return UserConfig()
    return validate_doc(read_yaml(path), UserConfig, what="user config")

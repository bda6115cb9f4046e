"""The `webhooks` section: the admission webhooks every replica serves."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scheduler.config.readers import boolean, integer, listen_host, optional_path
from scheduler.config.tree import check_settings, reads


@dataclass(frozen=True, slots=True)
class WebhooksConfig:
    """Admission webhooks (kopf's webhook server in this process); see docs/operations.md."""

    enabled: bool = field(default=False, metadata=reads(boolean))
    """Serve the validating (PriorityClass reclaim annotations) and mutating (schedulerName of
    GPU pods) webhooks. Every replica serves them, leader or not."""
    address: str = field(default="0.0.0.0", metadata=reads(listen_host))
    """Host name or IP address the HTTPS server listens on ("" or 0.0.0.0: all interfaces)."""
    port: int = field(default=9443, metadata=reads(integer(0, 65535)))
    """Port of the HTTPS server; 0 picks a free port (tests)."""
    cert_dir: Path | None = field(default=None, metadata=reads(optional_path))
    """Folder of a mounted `kubernetes.io/tls` Secret (tls.crt, tls.key, optional ca.crt), re-read
    when the files change; null: a self-signed certificate is made at start."""

    def __post_init__(self) -> None:
        check_settings(self)

"""A minimal writer of single-layer OCI images, for the real node's offline images.

No registry is reachable from the machines this project runs on, so the sandbox (pause) image and
the probe image that pods on the real node run are assembled here from static binaries and
imported into containerd with `ctr images import`. The archive follows the OCI image layout
(image-spec v1.1, "image-layout.md"): a tar holding `oci-layout`, `index.json` and content-addressed
`blobs/sha256/<digest>` for one uncompressed layer, its image config and its manifest. The index
names the image twice: `io.containerd.image.name` (the full reference, which containerd's importer
uses as is) and `org.opencontainers.image.ref.name` (the tag, as the spec asks).

The output is byte-for-byte reproducible: fixed timestamps, owners and entry order.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
CONTAINERD_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class ImageFile:
    """One regular file of the image's only layer."""

    path: str
    """Absolute path inside the image, e.g. "/pause"."""
    content: bytes
    mode: int = 0o755


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob and its descriptor fields."""

    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, annotations: Mapping[str, str] | None = None) -> dict[str, object]:
        descriptor: dict[str, object] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": len(self.data),
        }
        if annotations:
            descriptor["annotations"] = dict(annotations)
        return descriptor


def goarch(machine: str | None = None) -> str:
    """The OCI/Go architecture name of `machine` (default: this machine), e.g. "amd64".

    Raises ValueError for an architecture this writer does not know."""
    machine = machine or platform.machine()
    try:
        return _GOARCH[machine]
    except KeyError:
        raise ValueError(f"unknown machine architecture {machine[:40]!r}") from None


def _tar_bytes(entries: Sequence[tuple[str, bytes, int]]) -> bytes:
    """A tar of regular files (name without leading "/", content, mode), parent folders first,
    owned by root, timestamps 0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders: set[str] = set()
        for name, _, _ in entries:
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folders.add("/".join(parts[:depth]))
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, content, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = mode
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def image_blobs(
    name: str,
    files: Sequence[ImageFile],
    entrypoint: Sequence[str],
    arch: str | None = None,
) -> tuple[Blob, Blob, Blob, Blob]:
    """The layer, config, manifest and index blobs of an image `name` ("host/repo:tag").

    Raises ValueError when `name` has no tag or a file path is not absolute."""
    repository, _, tag = name.rpartition(":")
    if not repository or not tag or "/" in tag:
        raise ValueError(f"image name needs a tag, like host/repo:tag; got {name[:80]!r}")
    for file in files:
        if not file.path.startswith("/") or file.path.rstrip("/") == "":
            raise ValueError(f"image file path must be absolute: {file.path[:80]!r}")
    layer = Blob(
        LAYER_MEDIA_TYPE,
        _tar_bytes([(f.path.lstrip("/"), f.content, f.mode) for f in files]),
    )
    config = Blob(
        CONFIG_MEDIA_TYPE,
        _json(
            {
                "architecture": arch or goarch(),
                "os": "linux",
                "config": {"Entrypoint": list(entrypoint), "WorkingDir": "/"},
                "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
            }
        ),
    )
    manifest = Blob(
        MANIFEST_MEDIA_TYPE,
        _json(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_MEDIA_TYPE,
                "config": config.descriptor(),
                "layers": [layer.descriptor()],
            }
        ),
    )
    index = Blob(
        INDEX_MEDIA_TYPE,
        _json(
            {
                "schemaVersion": 2,
                "mediaType": INDEX_MEDIA_TYPE,
                "manifests": [
                    manifest.descriptor(
                        {CONTAINERD_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: tag}
                    )
                ],
            }
        ),
    )
    return layer, config, manifest, index


def write_image_archive(
    path: Path,
    name: str,
    files: Sequence[ImageFile],
    entrypoint: Sequence[str],
    arch: str | None = None,
) -> str:
    """Write the OCI image layout tar of image `name` to `path`; returns the manifest digest."""
    layer, config, manifest, index = image_blobs(name, files, entrypoint, arch)
    entries = [
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644),
        ("index.json", index.data, 0o644),
    ]
    for blob in (layer, config, manifest):
        entries.append((f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", blob.data, 0o644))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_tar_bytes(entries))
    return manifest.digest


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

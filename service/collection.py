"""The service's collection in its index dir, opened the one way both the service and
``fractal import`` open it.

Free of FastAPI (and of torch), so that the bulk importer (:mod:`bulk.importer`) builds the very
collection the service will serve: same index kinds, parameters and PQ codebooks, and the same
``bundle.json`` record of which bundle made the stored vectors. Problems are one-line
:class:`IndexDirError`\\ s; the service reports them as start-up errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bundle import Manifest
from index import Collection
from service.settings import Settings

BUNDLE_RECORD = "bundle.json"


class IndexDirError(Exception):
    """The index dir or the bundle's index parts cannot be used; the message is one line."""


def check_bundle_record(index_dir: Path, manifest: Manifest) -> None:
    """Write ``bundle.json`` in a new index dir; refuse one made with another bundle."""
    record_path = index_dir / BUNDLE_RECORD
    expected = {"name": manifest.name, "bundle_hash": manifest.content_hash, "dim": manifest.dim}
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexDirError(f"{record_path} is unreadable: {exc}") from exc
        if record != expected:
            raise IndexDirError(
                f"index dir {index_dir} holds vectors of bundle {record.get('name')!r} "
                f"({str(record.get('bundle_hash'))[:12]}), not of the served bundle "
                f"{manifest.name!r} ({manifest.content_hash[:12]}); use another "
                "FRACTAL_INDEX_DIR or re-ingest"
            )
        return
    if (index_dir / "store.sqlite3").exists():
        raise IndexDirError(
            f"index dir {index_dir} has a store but no {BUNDLE_RECORD}: cannot tell which "
            "bundle made its vectors"
        )
    record_path.write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")


def bundle_pq_codebooks(settings: Settings, manifest: Manifest) -> dict[int, np.ndarray]:
    """The bundle's PQ centroids by prefix dimension (MSHC), when the service builds PQ indexes.

    The bundle's sha256 check has already vouched for the file; its shape must match the manifest.
    """
    spec = manifest.compression.pq if manifest.compression is not None else None
    if spec is None or "pq" not in settings.index_kinds + (settings.fine_index_kinds or ()):
        return {}
    path = settings.bundle_dir / spec.file
    try:
        codebooks = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexDirError(f"cannot read the bundle's PQ codebooks {path}: {exc}") from exc
    if codebooks.shape != spec.shape or codebooks.dtype != np.float32:
        raise IndexDirError(
            f"{path} holds {codebooks.dtype} {list(codebooks.shape)}, the manifest says "
            f"float32 {list(spec.shape)}"
        )
    return {spec.dim: codebooks}


def open_collection(settings: Settings, manifest: Manifest) -> Collection:
    """The collection in ``settings.index_dir``, indexed at the coarse prefix, at C2F's shortlist
    prefix (the bundle's measured one, :attr:`bundle.Manifest.shortlist_dim`) and at the fine
    one (:meth:`Settings.index_layout`); a PQ index at a dimension the bundle ships PQ codebooks
    for uses them (MSHC)."""
    fragment_dim = manifest.fragment_dim
    if fragment_dim is None and settings.sfs:
        fragment_dim = settings.sfs_fragment_dim
    try:
        settings.index_dir.mkdir(parents=True, exist_ok=True)
        check_bundle_record(settings.index_dir, manifest)
        return Collection(
            settings.index_dir,
            dim=manifest.dim,
            prefix_dims=sorted({manifest.coarse_dim, manifest.shortlist_dim, manifest.fine_dim}),
            index_kinds=settings.index_kinds,
            hnsw=settings.hnsw,
            pq=settings.pq,
            fragment_dim=fragment_dim,
            pq_codebooks=bundle_pq_codebooks(settings, manifest),
            layout=settings.index_layout(
                manifest.coarse_dim, manifest.fine_dim, manifest.shortlist_dim
            ),
            full_dtype=settings.full_vectors_dtype,
        )
    except (OSError, ValueError) as exc:
        raise IndexDirError(f"cannot open the index in {settings.index_dir}: {exc}") from exc

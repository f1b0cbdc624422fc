"""Writing a bundle: check where it goes, build it in a staging folder beside that place, and
install it there in one move once it is complete and verified.

Every bundle writer (``training.export``, ``training.quantize``) goes through these three steps,
so that a failed or interrupted write leaves the output folder as it was. An installed bundle is
readable by every user, whatever the writer's umask: the service that reads it may run as another
user (a container's). Standard library only, like :mod:`bundle.format`.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bundle.format import BundleError, Manifest, load_bundle, write_manifest

READ_BY_ALL = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
SEARCH_BY_ALL = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """A bundle may go to ``out_dir``: absent, empty, or to be replaced (``overwrite``).

    Raises :class:`BundleError` otherwise.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise BundleError(f"bundle path {out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise BundleError(f"bundle directory {out_dir} is not empty (pass --overwrite)")


@contextmanager
def staging_dir(out_dir: Path) -> Iterator[Path]:
    """A new folder beside ``out_dir`` to build a bundle in; whatever is left of it (all of it,
    unless :func:`install_bundle` moved it) is removed when the block ends."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp.", dir=out_dir.parent))
    try:
        yield staging
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def make_readable_by_all(folder: Path) -> None:
    """Let every user read every file under ``folder`` and list and enter every folder
    (``folder`` included), keeping the permission bits already set. Links are left alone."""
    for path in (folder, *folder.rglob("*")):
        if path.is_symlink():
            continue
        added = READ_BY_ALL | SEARCH_BY_ALL if path.is_dir() else READ_BY_ALL
        path.chmod(stat.S_IMODE(path.stat().st_mode) | added)


def install_bundle(staging: Path, manifest: Manifest, out_dir: Path) -> Manifest:
    """Hash ``staging``'s files into ``manifest``, write it, verify the bundle as the service
    will, make it readable by every user (:func:`make_readable_by_all`), then move it to
    ``out_dir`` (replacing what was there); the written manifest."""
    written = write_manifest(staging, manifest)
    load_bundle(staging)
    make_readable_by_all(staging)
    if out_dir.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
        out_dir.rename(retired / out_dir.name)
        staging.rename(out_dir)
        shutil.rmtree(retired)
    else:
        staging.rename(out_dir)
    return written

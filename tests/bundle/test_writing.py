"""Writing a bundle (``bundle.writing``) for a reader that runs as another user, and what that
reader says when it may not read one.

The files are placeholder bytes, as in ``test_format.py``: permissions and hashes are what matter.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bundle import (
    ENCODER_FILE,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    Backbone,
    BundleError,
    Manifest,
    install_bundle,
    load_bundle,
    staging_dir,
)

MANIFEST = Manifest(
    name="test-identity",
    objective="identity",
    backbone=Backbone(
        source="/models/minilm", pooling="mean", max_tokens=256, hidden_size=384, fingerprint="x"
    ),
    dim=384,
    prefix_dims=(64, 384),
    granularity={"coarse": 64, "fine": 384},
    onnx_max_abs_diff=0.0,
    created_at="2026-01-01T00:00:00+00:00",
)
READ_BY_OTHERS = stat.S_IRGRP | stat.S_IROTH
SEARCH_BY_OTHERS = stat.S_IXGRP | stat.S_IXOTH


def _write_bundle(out_dir: Path) -> None:
    """A bundle with a file in a subfolder, written the way the exporters write one."""
    with staging_dir(out_dir) as staging:
        (staging / ENCODER_FILE).write_bytes(b"encoder graph bytes")
        (staging / TOKENIZER_FILE).write_text('{"model": {}}', encoding="utf-8")
        (staging / "plots").mkdir()
        (staging / "plots" / "accuracy.png").write_bytes(b"\x89PNG")
        install_bundle(staging, MANIFEST, out_dir)


def test_a_bundle_written_under_a_private_umask_is_readable_by_every_user(
    tmp_path: Path,
) -> None:
    out_dir = tmp_path / "bundle"
    previous = os.umask(0o077)
    try:
        _write_bundle(out_dir)
    finally:
        os.umask(previous)
    folders = [out_dir, *(path for path in out_dir.rglob("*") if path.is_dir())]
    files = [path for path in out_dir.rglob("*") if path.is_file()]
    assert {path.name for path in files} == {
        ENCODER_FILE, TOKENIZER_FILE, "accuracy.png", MANIFEST_FILE
    }  # fmt: skip
    for folder in folders:
        mode = stat.S_IMODE(folder.stat().st_mode)
        assert mode & (stat.S_IRWXU | READ_BY_OTHERS | SEARCH_BY_OTHERS) == 0o755, folder
    for file in files:
        mode = stat.S_IMODE(file.stat().st_mode)
        assert mode & (stat.S_IRUSR | stat.S_IWUSR | READ_BY_OTHERS) == 0o644, file
    assert load_bundle(out_dir).name == MANIFEST.name


def test_a_bundle_this_process_may_not_read_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests run as root, which permission bits do not stop: opening the encoder is refused here
    the way the kernel refuses it to another user."""
    out_dir = tmp_path / "bundle"
    _write_bundle(out_dir)
    refused = out_dir / ENCODER_FILE
    path_open = Path.open

    def open_refusing_the_encoder(self: Path, *args: object, **kwargs: object):
        if self == refused:
            raise PermissionError(13, "Permission denied", str(self))
        return path_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_refusing_the_encoder)
    with pytest.raises(BundleError) as error:
        load_bundle(out_dir)
    message = str(error.value)
    assert message.startswith(f"permission denied reading {refused} (this process runs as uid ")
    assert message.endswith(f"make the bundle readable by every user with: chmod -R a+rX {out_dir}")
    assert "\n" not in message

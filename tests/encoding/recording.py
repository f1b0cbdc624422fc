"""An encoder's session wrapped to record the shape of every call it is given."""

from __future__ import annotations

from typing import Any

import numpy as np

from bundle import INPUT_IDS
from encoding.encoder import OnnxEncoder


class RecordingSession:
    """The encoder's session, recording the ``input_ids`` shape of every call."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.shapes: list[tuple[int, ...]] = []

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.shapes.append(feeds[INPUT_IDS].shape)
        return self.session.run(outputs, feeds)


def recorded(encoder: OnnxEncoder) -> RecordingSession:
    """``encoder``'s session replaced by a recording one, which is returned."""
    recording = RecordingSession(encoder.session)
    encoder.session = recording  # type: ignore[assignment]
    return recording

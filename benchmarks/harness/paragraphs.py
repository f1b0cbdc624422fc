"""Paragraph-length texts for the encoder benchmarks, made of the CLINC-150 Wikipedia sentences.

CLINC utterances are short (about 11 tokens); ingest of a real corpus reads paragraphs of 40–60
tokens. The Wikipedia sentences are short too: two of them joined make only about 21 tokens
(MiniLM's tokenizer), so a paragraph here joins randomly drawn sentences (seeded) until it has at
least :data:`MIN_WORDS` words, which gives 40–60 tokens (see ``tests/benchmarks``). Paragraphs
never repeat, so any count up to millions can be asked for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from training.data.unlabelled import wiki_sentences

MIN_WORDS = 36
"""About 1.2 MiniLM tokens per word of these (lower-case, unpunctuated) sentences."""


def paragraphs(data_dir: Path, count: int, seed: int = 0) -> list[str]:
    """``count`` distinct paragraphs of Wikipedia sentences (see the module docstring)."""
    sentences = wiki_sentences(data_dir)
    rng = np.random.default_rng(seed)
    made: dict[str, None] = {}
    while len(made) < count:
        parts: list[str] = []
        words = 0
        while words < MIN_WORDS:
            sentence = sentences[int(rng.integers(len(sentences)))]
            parts.append(sentence)
            words += len(sentence.split())
        made[" ".join(parts)] = None
    return list(made)

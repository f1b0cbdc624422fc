"""The unlabelled training corpus of the MIC and MIPIC papers' own setting, built from our data.

The papers train their encoders on 24,000 distinct unlabelled sentences sampled across task
categories: 6,000 from classification datasets and the flattened sentences of 3,000 STS and
3,000 pair-classification pairs (MIC, appendix B.1; MIPIC, appendix A.2). We have no STS or NLI
data here. The closest mix of what we have is three equal shares:

- ``banking77``: Banking77 training texts (10,003; the test split is never used);
- ``clinc150``: CLINC-150 in-scope training texts (15,000; the test split is never used);
- ``wikipedia``: the 14,750 Wikipedia sentences shipped with CLINC-150 (general prose).

Each source is deduplicated and shuffled with the seed. The sources then take turns: each adds
its next text that no source has given yet, until the corpus holds ``size`` texts (a third
from each, to within one). Labels are never read into the corpus. The evaluation datasets'
*training* texts are in it, as in the papers; classification is scored on their test splits,
which the corpus never contains (the few texts both splits of a dataset share, 5 in Banking77
and 2 in CLINC-150, are left out too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data.registry import load_dataset
from training.errors import FractalError

WIKI_FILE = Path("clinc150") / "all_wiki_sents.txt"
SOURCES = ("banking77", "clinc150", "wikipedia")
PAPER_CORPUS_SIZE = 24_000


def wiki_sentences(data_dir: Path) -> list[str]:
    """The distinct, non-empty Wikipedia sentences of the data folder, in file order."""
    path = data_dir / WIKI_FILE
    if not path.is_file():
        raise FractalError(f"{path}: missing (the CLINC-150 Wikipedia sentences)")
    text = path.read_text(encoding="utf-8")
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


@dataclass(frozen=True)
class UnlabelledCorpus:
    """The texts (shuffled) and how many each source gave."""

    texts: tuple[str, ...]
    per_source: dict[str, int]
    seed: int


def _source_texts(name: str, data_dir: Path) -> list[str]:
    if name == "wikipedia":
        return wiki_sentences(data_dir)
    splits = load_dataset(name, data_dir=data_dir, max_train=None, max_test=None)
    held_out = set(splits.test.texts)
    return list(
        dict.fromkeys(
            text.strip() for text in splits.train.texts if text.strip() and text not in held_out
        )
    )


def unlabelled_corpus(
    data_dir: Path, size: int = PAPER_CORPUS_SIZE, seed: int = 0
) -> UnlabelledCorpus:
    """``size`` distinct texts, an equal share from each of :data:`SOURCES` (module docstring)."""
    if size < 1:
        raise FractalError(f"the unlabelled corpus needs at least one text, not {size}")
    rng = np.random.default_rng(seed)
    queues = {}
    for name in SOURCES:
        texts = _source_texts(name, data_dir)
        queues[name] = [texts[i] for i in rng.permutation(len(texts))]
    chosen: dict[str, None] = {}
    per_source = dict.fromkeys(SOURCES, 0)
    positions = dict.fromkeys(SOURCES, 0)
    while len(chosen) < size:
        added = False
        for name in SOURCES:
            queue = queues[name]
            while positions[name] < len(queue) and queue[positions[name]] in chosen:
                positions[name] += 1
            if positions[name] < len(queue) and len(chosen) < size:
                chosen[queue[positions[name]]] = None
                per_source[name] += 1
                positions[name] += 1
                added = True
        if not added:
            raise FractalError(
                f"the sources hold {len(chosen)} distinct texts, fewer than the {size} asked for"
            )
    texts = list(chosen)
    order = rng.permutation(len(texts))
    return UnlabelledCorpus(tuple(texts[i] for i in order), per_source, seed)

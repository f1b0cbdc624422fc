"""Labelled utterances (CLINC-150's, for the service benchmarks) as ``POST /documents`` bodies."""

from __future__ import annotations

from collections.abc import Mapping

from training.data.dataset import HierarchicalDataset


def labelled_documents(
    dataset: HierarchicalDataset, fields: Mapping[str, int], id_prefix: str | None = None
) -> list[dict]:
    """One document per text; its metadata names the text's label at each level in ``fields``
    (metadata key → level, e.g. ``{"domain": 0, "intent": 1}``); ids are ``id_prefix`` + row
    number, or left to the service when ``id_prefix`` is None."""
    names = dataset.hierarchy.label_names
    documents = []
    for row, text in enumerate(dataset.texts):
        labels = dataset.labels[row]
        metadata = {key: names[level][labels[level]] for key, level in fields.items()}
        identity = {} if id_prefix is None else {"id": f"{id_prefix}{row}"}
        documents.append({**identity, "text": text, "metadata": metadata})
    return documents

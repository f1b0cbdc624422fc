"""The labelled, hierarchical dataset every loader returns and every trainer consumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from training.errors import FractalError


@dataclass(frozen=True)
class LabelHierarchy:
    """Level names (coarse first) and, per level, the label names indexed by label id."""

    level_names: tuple[str, ...]
    label_names: tuple[tuple[str, ...], ...]

    @property
    def depth(self) -> int:
        return len(self.level_names)

    def num_classes(self, level: int) -> int:
        return len(self.label_names[level])

    def to_json(self) -> dict:
        return {
            "levels": [
                {"name": name, "labels": list(labels)}
                for name, labels in zip(self.level_names, self.label_names, strict=True)
            ]
        }


@dataclass(frozen=True)
class HierarchicalDataset:
    """Texts with one integer label per hierarchy level.

    ``labels[i, level]`` is the id of text ``i``'s label at ``level`` (0 = coarsest); ids index
    ``hierarchy.label_names[level]``. Every finer label has exactly one parent at each coarser
    level.
    """

    name: str
    texts: tuple[str, ...]
    labels: np.ndarray
    hierarchy: LabelHierarchy

    def __post_init__(self) -> None:
        if self.labels.ndim != 2 or self.labels.shape != (len(self.texts), self.hierarchy.depth):
            raise ValueError(
                f"labels must have shape ({len(self.texts)}, {self.hierarchy.depth}), "
                f"got {self.labels.shape}"
            )

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int] | np.ndarray) -> HierarchicalDataset:
        indices = np.asarray(indices, dtype=np.int64)
        return HierarchicalDataset(
            name=self.name,
            texts=tuple(self.texts[i] for i in indices),
            labels=self.labels[indices],
            hierarchy=self.hierarchy,
        )

    def sample(self, max_size: int | None, seed: int) -> HierarchicalDataset:
        """A seeded random subset of at most ``max_size`` rows (all rows, shuffled, if None)."""
        order = np.random.default_rng(seed).permutation(len(self))
        if max_size is not None:
            order = np.sort(order[:max_size])
        return self.subset(order)


@dataclass(frozen=True)
class DatasetSplits:
    """Train and test splits over one shared hierarchy."""

    train: HierarchicalDataset
    test: HierarchicalDataset

    @property
    def hierarchy(self) -> LabelHierarchy:
        return self.train.hierarchy


def build_hierarchy(
    name: str,
    level_names: Sequence[str],
    rows: Sequence[tuple[str, Sequence[str]]],
    splits: Sequence[str],
) -> dict[str, HierarchicalDataset]:
    """Turn ``(text, [label per level])`` rows tagged with split names into datasets.

    Label ids are assigned in sorted name order per level, over all splits, so train and test agree.
    Raises :class:`FractalError` for empty texts, a wrong number of levels, a level with a single
    label, or a label with two different parents.
    """
    depth = len(level_names)
    if depth < 1:
        raise FractalError(f"{name}: at least one label level is needed")
    if len(rows) != len(splits):
        raise ValueError("rows and splits must have the same length")
    if not rows:
        raise FractalError(f"{name}: no labelled rows were found")
    parent: list[dict[str, str]] = [dict() for _ in range(depth)]
    for line, (text, path) in enumerate(rows, start=1):
        if not text or not text.strip():
            raise FractalError(f"{name}: row {line} has an empty text")
        if len(path) != depth:
            raise FractalError(
                f"{name}: row {line} has {len(path)} label level(s), expected {depth} "
                f"({', '.join(level_names)})"
            )
        for level in range(depth):
            label = path[level]
            if not label:
                raise FractalError(f"{name}: row {line} has an empty {level_names[level]} label")
            if level == 0:
                continue
            seen = parent[level].setdefault(label, path[level - 1])
            if seen != path[level - 1]:
                raise FractalError(
                    f"{name}: {level_names[level]} label {label!r} appears under two "
                    f"{level_names[level - 1]} labels, {seen!r} and {path[level - 1]!r}; "
                    "every label needs exactly one parent"
                )
    label_names = tuple(tuple(sorted({path[level] for _, path in rows})) for level in range(depth))
    for level, names in enumerate(label_names):
        if len(names) < 2:
            raise FractalError(
                f"{name}: level {level_names[level]!r} has a single label ({names[0]!r}); "
                "each level needs at least two"
            )
    hierarchy = LabelHierarchy(tuple(level_names), label_names)
    index = [{label: i for i, label in enumerate(names)} for names in label_names]
    out: dict[str, HierarchicalDataset] = {}
    for split in dict.fromkeys(splits):
        members = [i for i, s in enumerate(splits) if s == split]
        out[split] = HierarchicalDataset(
            name=name,
            texts=tuple(rows[i][0] for i in members),
            labels=np.array(
                [[index[lv][rows[i][1][lv]] for lv in range(depth)] for i in members],
                dtype=np.int64,
            ).reshape(len(members), depth),
            hierarchy=hierarchy,
        )
    return out

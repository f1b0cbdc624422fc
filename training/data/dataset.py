"""The labelled, hierarchical dataset every loader returns and every trainer consumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bundle import HierarchyLevel, label_display_name, label_paths
from training.errors import FractalError


@dataclass(frozen=True)
class LabelHierarchy:
    """Level names (coarse first) and, per level, its labels indexed by label id.

    A label is identified by its **path** from the root, ``("LOC", "other")``, not by its name:
    one name under several parents (``LOC:other``, ``NUM:other``) is several labels, with their
    own ids. ``label_names[level][i]`` is label ``i``'s own name (the path's last part) and
    ``parents[level][i]`` the id of its parent in ``level - 1`` (level 0: an empty tuple). A
    label is shown as its path joined by :data:`bundle.LABEL_PATH_SEPARATOR` (``LOC / other``).
    """

    level_names: tuple[str, ...]
    label_names: tuple[tuple[str, ...], ...]
    parents: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not len(self.label_names) == len(self.parents) == self.depth:
            raise ValueError(
                f"{self.depth} level names, {len(self.label_names)} label lists and "
                f"{len(self.parents)} parent lists: give one of each per level"
            )
        _ = self.paths  # checks the parents: one per label, in range, no path twice

    @property
    def depth(self) -> int:
        return len(self.level_names)

    def num_classes(self, level: int) -> int:
        return len(self.label_names[level])

    @cached_property
    def paths(self) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """``paths[level][label_id]``: the label's names from the root down to it."""
        return label_paths(self.level_names, self.label_names, self.parents)

    def path(self, level: int, label_id: int) -> tuple[str, ...]:
        return self.paths[level][label_id]

    def display_name(self, level: int, label_id: int) -> str:
        """The name a report or the service shows for a label: its path, e.g. ``LOC / other``."""
        return label_display_name(self.path(level, label_id))

    def display_names(self, level: int) -> tuple[str, ...]:
        return tuple(label_display_name(path) for path in self.paths[level])

    def manifest_levels(self) -> tuple[HierarchyLevel, ...]:
        """The hierarchy as a bundle manifest records it (no parents on the first level)."""
        return tuple(
            HierarchyLevel(name, labels, parents if level else None)
            for level, (name, labels, parents) in enumerate(
                zip(self.level_names, self.label_names, self.parents, strict=True)
            )
        )

    def to_json(self) -> dict:
        return {"levels": [level.to_json() for level in self.manifest_levels()]}


@dataclass(frozen=True)
class HierarchicalDataset:
    """Texts with one integer label per hierarchy level.

    ``labels[i, level]`` is the id of text ``i``'s label at ``level`` (0 = coarsest); ids index
    ``hierarchy.label_names[level]``. Every finer label has exactly one parent at each coarser
    level (``hierarchy.parents``).
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

    A label is its path from the root (the first ``level + 1`` names of a row's labels), so a
    name repeated under different parents makes different labels, and a label's parent is
    always the one its path names. Label ids are assigned per level over all splits, so train
    and test agree, in order of the label's name, then of its parent's path: a hierarchy whose
    names do not repeat gets the plain sorted name order. Raises :class:`FractalError` for empty
    texts or labels, a wrong number of levels, or a level with a single label.
    """
    depth = len(level_names)
    if depth < 1:
        raise FractalError(f"{name}: at least one label level is needed")
    if len(rows) != len(splits):
        raise ValueError("rows and splits must have the same length")
    if not rows:
        raise FractalError(f"{name}: no labelled rows were found")
    paths: list[tuple[str, ...]] = []
    for line, (text, path) in enumerate(rows, start=1):
        if not text or not text.strip():
            raise FractalError(f"{name}: row {line} has an empty text")
        if len(path) != depth:
            raise FractalError(
                f"{name}: row {line} has {len(path)} label level(s), expected {depth} "
                f"({', '.join(level_names)})"
            )
        for level in range(depth):
            if not path[level]:
                raise FractalError(f"{name}: row {line} has an empty {level_names[level]} label")
        paths.append(tuple(path))
    label_names: list[tuple[str, ...]] = []
    parents: list[tuple[int, ...]] = []
    ids: list[dict[tuple[str, ...], int]] = []
    for level in range(depth):
        labels = sorted({path[: level + 1] for path in paths}, key=lambda p: (p[-1], p))
        if len(labels) < 2:
            raise FractalError(
                f"{name}: level {level_names[level]!r} has a single label "
                f"({label_display_name(labels[0])!r}); each level needs at least two"
            )
        label_names.append(tuple(label[-1] for label in labels))
        parents.append(tuple(ids[level - 1][label[:-1]] for label in labels) if level else ())
        ids.append({label: i for i, label in enumerate(labels)})
    hierarchy = LabelHierarchy(tuple(level_names), tuple(label_names), tuple(parents))
    out: dict[str, HierarchicalDataset] = {}
    for split in dict.fromkeys(splits):
        members = [i for i, s in enumerate(splits) if s == split]
        out[split] = HierarchicalDataset(
            name=name,
            texts=tuple(rows[i][0] for i in members),
            labels=np.array(
                [[ids[lv][paths[i][: lv + 1]] for lv in range(depth)] for i in members],
                dtype=np.int64,
            ).reshape(len(members), depth),
            hierarchy=hierarchy,
        )
    return out

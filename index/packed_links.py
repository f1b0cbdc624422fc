"""An HNSW graph's links packed for the native walk: the same graph in about a quarter of the
bytes FAISS gives its links.

FAISS keeps ``2 M`` slots of 4 bytes for every node's bottom-level links (256 B at M 32), -1 after
the last; a node fills about 28 of its 64. Packed, each node's bottom-level list is sorted and
stored as its length, a bit width, the first neighbour's distance from the node and each next
neighbour's distance from the one before, at that width. With the nodes numbered for locality
(:mod:`index.graph_order`) neighbours have near numbers, so the distances are small: about 56 B
per node at 200K nodes and M 32, plus a 4-byte start. The upper levels (about one node in M has
them) keep FAISS's slots, for those nodes alone, and each node's level takes a byte instead of
FAISS's four (and its 8-byte offset). The C walk (:mod:`index.native_funnel`) reads this layout
in place, unpacking a list as it expands its node.

:func:`pack` makes the packed links from a graph's FAISS arrays, :func:`release` then frees those
arrays, and :func:`restore` makes them again from the packed links (FAISS needs them to add to,
save, renumber or walk the graph itself). The codes and the ID map stay where FAISS keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from index.native import load

_NATIVE = load("index._native_funnel")


@dataclass(frozen=True)
class PackedLinks:
    """A graph's links, packed: the bottom level per node (``packed`` from ``starts[node]``),
    and the upper levels' FAISS slots (``upper``) of ``upper_nodes`` (ascending), from
    ``upper_starts[i]``; ``levels`` holds each node's levels (FAISS's, in a byte each) and
    ``width`` the bottom level's slots per node (``2 M``)."""

    levels: np.ndarray
    packed: np.ndarray
    starts: np.ndarray
    upper_nodes: np.ndarray
    upper_starts: np.ndarray
    upper: np.ndarray
    width: int

    @property
    def nbytes(self) -> int:
        """The bytes the packed links take."""
        parts = (
            self.levels,
            self.packed,
            self.starts,
            self.upper_nodes,
            self.upper_starts,
            self.upper,
        )
        return sum(part.nbytes for part in parts)


def available() -> bool:
    """Whether links can be packed here (the native extension was built)."""
    return _NATIVE is not None


def _offsets(cum: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Each node's first slot (and the end) in FAISS's layout, from the cumulative slots per
    level and the node levels (levels + 1, as FAISS keeps them)."""
    offsets = np.zeros(len(levels) + 1, dtype=np.uint64)
    np.cumsum(cum[levels], out=offsets[1:])
    return offsets


def _cumulative(hnsw: Any) -> np.ndarray:
    return faiss.vector_to_array(hnsw.cum_nneighbor_per_level).astype(np.int64)


def pack(hnsw: Any) -> PackedLinks:
    """``hnsw``'s links (a ``faiss.HNSW`` with its arrays present), packed;
    :class:`ValueError` when the bottom level has over 255 slots per node or the packed lists
    would pass 4 GiB."""
    if _NATIVE is None:
        raise RuntimeError("packing links needs the native extension (index/native_funnel.c)")
    cum = _cumulative(hnsw)
    levels = faiss.vector_to_array(hnsw.levels).astype(np.int64)
    if levels.size and levels.max() > 255:
        raise ValueError("a graph of over 255 levels cannot be packed")
    nodes = len(levels)
    offsets = faiss.rev_swig_ptr(hnsw.offsets.data(), nodes + 1)
    if not np.array_equal(offsets, _offsets(cum, levels)):  # restore lays them out again
        raise ValueError("the graph's links are not laid out as FAISS lays them out")
    neighbors = faiss.rev_swig_ptr(hnsw.neighbors.data(), hnsw.neighbors.size())
    starts = np.empty(nodes + 1, dtype=np.uint32)
    packed = np.frombuffer(
        _NATIVE.pack_links(neighbors, offsets, int(cum[1]), starts), dtype=np.uint8
    )
    upper_nodes = np.flatnonzero(levels > 1).astype(np.int32)
    lengths = cum[levels[upper_nodes]] - cum[1]
    upper_starts = np.zeros(len(upper_nodes) + 1, dtype=np.uint32)
    np.cumsum(lengths, out=upper_starts[1:])
    first = offsets[upper_nodes].astype(np.int64) + cum[1]
    within = np.arange(int(lengths.sum())) - np.repeat(upper_starts[:-1].astype(np.int64), lengths)
    upper = neighbors[np.repeat(first, lengths) + within].astype(np.int32)
    small = levels.astype(np.uint8)
    return PackedLinks(small, packed, starts, upper_nodes, upper_starts, upper, int(cum[1]))


def release(hnsw: Any) -> None:
    """Frees ``hnsw``'s links, offsets and node levels (FAISS cannot walk, add to or save the
    graph until :func:`restore`)."""
    hnsw.neighbors.owned_data.swap(faiss.Int32Vector())
    hnsw.neighbors.clear()  # points the vector at its (now empty) storage
    hnsw.offsets.swap(faiss.UInt64Vector())
    hnsw.levels.swap(faiss.Int32Vector())


def restore(hnsw: Any, links: PackedLinks) -> None:
    """Makes ``hnsw``'s links, offsets and node levels again from ``links``, as FAISS lays them
    out (each bottom-level list in ascending order)."""
    assert _NATIVE is not None  # links were packed by it
    cum = _cumulative(hnsw)
    nodes = len(links.levels)
    hnsw.levels.resize(nodes)
    faiss.rev_swig_ptr(hnsw.levels.data(), nodes)[:] = links.levels
    offsets = _offsets(cum, links.levels.astype(np.int64))
    hnsw.offsets.resize(nodes + 1)
    faiss.rev_swig_ptr(hnsw.offsets.data(), nodes + 1)[:] = offsets
    hnsw.neighbors.resize(int(offsets[-1]))
    neighbors = faiss.rev_swig_ptr(hnsw.neighbors.data(), int(offsets[-1]))
    neighbors[:] = -1
    lengths: np.ndarray = np.diff(links.upper_starts.astype(np.int64))
    first = offsets[links.upper_nodes].astype(np.int64) + cum[1]
    within = np.arange(len(links.upper)) - np.repeat(
        links.upper_starts[:-1].astype(np.int64), lengths
    )
    neighbors[np.repeat(first, lengths) + within] = links.upper
    _NATIVE.unpack_links(links.packed, links.starts, offsets, links.width, neighbors)

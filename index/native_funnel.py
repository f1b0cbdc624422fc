"""The C2F funnel's own native path: a view of an ID-mapped FAISS HNSW graph (float32 values or
8-bit codes) and of the full rows, searched by one C call per query batch
(``index/native_funnel.c``).

FAISS's HNSW walk asks memory for one neighbour's code at a time; at a million nodes nearly
every one is a miss to DRAM, so the walk waits in turn on each. The C walk is FAISS's walk
(the same beam, the same stopping rule, the same results up to rounding) that first asks for the
codes of a node's unvisited neighbours a few places ahead of the one it scores, so their loads
overlap, and it folds the 8-bit decode into the query once per search. The re-rank reads the
shortlist's rows in the same call (prefetched, float16 with F16C). No Python runs per query or
candidate. A view made without rows is the walk alone, which serves a graph's plain search
(:meth:`index.faiss_indexes.HnswIndex.search`: the coarse route, and any single-index search).

It serves graphs that store float32 values or ``sq8`` or ``sq8u`` codes with inner product;
:func:`native_graph` returns None for anything else (4-bit or TurboQuant codes, a flat or PQ
index) and where the extension was not built (no C compiler at install), and the caller uses
FAISS (``IndexRefine``, or the graph's own search) instead.

The view reads FAISS's arrays in place, so it is valid while the graph is unchanged: an add may
move them, so a caller remakes it when the graph's node count changes, and never uses it while
the graph is being written (the collection's read lock)."""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from index import native
from index.packed_links import PackedLinks

_NATIVE = native.load("index._native_funnel")

_EIGHT_BIT = {
    int(faiss.ScalarQuantizer.QT_8bit): False,  # one range per coordinate
    int(faiss.ScalarQuantizer.QT_8bit_uniform): True,  # one range for all coordinates
}
"""The codes the C walk decodes, and whether their range is uniform."""

NATIVE_STORAGES = ("flat", "sq8", "sq8u")
"""The graph storages (:data:`index.faiss_indexes.HNSW_STORAGES`) the C walk reads: float32
values, and those 8-bit codes."""


def kernels() -> str | None:
    """The native kernels in use (``avx512``, ``avx2`` or ``portable``, from the CPU), or None
    where the extension is not built."""
    return None if _NATIVE is None else str(_NATIVE.kernels())


def walk(storage: str, native_walk: bool = True) -> str:
    """How a graph of ``storage`` codes is walked: ``native avx512`` (or ``avx2``, ``portable``:
    this module), or ``faiss`` (other codes, the extension not built, or ``native_walk``
    off). A graph of codes holds float32 until it is trained, and is walked natively until
    then."""
    name = kernels()
    if name is None or not native_walk or storage not in NATIVE_STORAGES:
        return "faiss"
    return f"native {name}"


def rows_of(flat: faiss.Index) -> np.ndarray:
    """The vectors of a flat index (``IndexFlat`` float32, or ``IndexScalarQuantizer`` float16)
    as a read-only ``(ntotal, d)`` view of its codes, not a copy."""
    code_size = flat.sa_code_size()  # the stored bytes of one vector
    dtype = np.float16 if code_size == 2 * flat.d else np.float32
    count = int(flat.ntotal)
    if not count:
        return np.zeros((0, flat.d), dtype=dtype)
    codes: Any = flat.codes  # type: ignore[attr-defined]  # a flat index's code vector
    raw = faiss.rev_swig_ptr(codes.data(), count * code_size)
    matrix = raw.view(dtype).reshape(count, flat.d)
    matrix.flags.writeable = False
    return matrix


def native_graph(
    base: faiss.Index, refine: faiss.Index | None, links: PackedLinks | None = None
) -> Any | None:
    """A native view of ``base`` (an ID map over an inner-product ``IndexHNSWFlat``, or an
    ``IndexHNSWSQ`` of 8-bit codes, whose ids are rows of ``refine``) and ``refine``'s rows, or
    None when the native path does not serve them (see the module docstring). Without
    ``refine``, the view is the walk alone: a search returns the best the walk found, scored by
    their codes, at the graph's own width. With ``links``, the walk reads those packed links
    (:mod:`index.packed_links`) instead of FAISS's, which may have been released."""
    if _NATIVE is None or not isinstance(base, faiss.IndexIDMap) or not base.ntotal:
        return None
    graph = faiss.downcast_index(base.index)
    if (
        not isinstance(graph, faiss.IndexHNSWFlat | faiss.IndexHNSWSQ)
        or graph.metric_type != faiss.METRIC_INNER_PRODUCT
    ):
        return None
    storage: Any = faiss.downcast_index(graph.storage)
    dim, nodes = graph.d, int(graph.ntotal)
    if isinstance(graph, faiss.IndexHNSWFlat):
        codes = faiss.rev_swig_ptr(storage.codes.data(), nodes * dim * 4).view(np.float32)
        vmin, vdiff = np.zeros(dim, np.float32), np.zeros(dim, np.float32)  # not read
    else:
        uniform = _EIGHT_BIT.get(int(storage.sq.qtype))
        if uniform is None:
            return None
        codes = faiss.rev_swig_ptr(storage.codes.data(), nodes * dim)
        trained = faiss.vector_to_array(storage.sq.trained).astype(np.float32)
        if uniform:
            vmin, vdiff = np.full(dim, trained[0], np.float32), np.full(dim, trained[1], np.float32)
        else:
            vmin, vdiff = trained[:dim].copy(), trained[dim:].copy()
    hnsw: Any = graph.hnsw  # the stubs lack HNSW's arrays
    id_map: Any = base.id_map
    layout: dict[str, np.ndarray | None]
    if links is None:
        layout = {
            "neighbors": faiss.rev_swig_ptr(hnsw.neighbors.data(), hnsw.neighbors.size()),
            "offsets": faiss.rev_swig_ptr(hnsw.offsets.data(), nodes + 1),
        }
    else:
        layout = {
            "neighbors": links.upper,
            "offsets": None,
            "packed": links.packed,
            "packed_starts": links.starts,
            "upper_nodes": links.upper_nodes,
            "upper_starts": links.upper_starts,
        }
    return _NATIVE.Graph(
        **layout,
        levels=faiss.vector_to_array(hnsw.cum_nneighbor_per_level).tolist(),
        entry_point=int(hnsw.entry_point),
        max_level=int(hnsw.max_level),
        codes=codes,
        vmin=vmin,
        vdiff=vdiff,
        ids=faiss.rev_swig_ptr(id_map.data(), nodes),
        rows=None if refine is None else rows_of(refine),
    )

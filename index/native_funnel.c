/* The C2F funnel in one native call per query batch: walk an HNSW graph of 8-bit codes (or
 * float32 values) at a prefix, then re-rank its shortlist exactly at the full dimension from the
 * row matrix.
 *
 * The walk is FAISS's own (HNSW::search with a bounded queue, as in 1.15): a greedy descent
 * through the upper levels, then at level 0 a beam of max(efSearch, shortlist) nodes, expanded
 * best first, with a node returned only when its bit is set in `allowed` (every node without
 * one). It reads FAISS's arrays in place. It differs in how it waits on memory: while it scores
 * a node's unvisited neighbours it asks for the codes of those a few places ahead (prefetch),
 * and for the neighbour list of the node it will most likely expand next, so those loads
 * overlap the scoring instead of following one another, and it folds the 8-bit decode into the
 * query once per search (code c at coordinate i stands for vmin_i + (c + 0.5) * vdiff_i / 255,
 * so a score is a constant plus the sum of c_i * q_i * vdiff_i / 255).
 *
 * The re-rank prefetches the shortlist's rows (float16 or float32, one per row id) and scores
 * them by inner product with the unit query; the k best are written to the caller's arrays.
 * A graph made without rows is the walk alone: the k best the walk found, scored by their codes
 * (what FAISS's own search of the graph returns).
 *
 * Everything after the arguments are read runs without the GIL. Kernels: AVX-512, AVX2 with
 * FMA and F16C, or portable C, chosen once from the CPU that runs it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FUNNEL_X86 1
#endif

#define MAX_LEVELS 64

/* ---- kernels --------------------------------------------------------------------------------- */

typedef float (*code_dot_fn)(const uint8_t *code, const float *weights, int dim);
typedef float (*row_dot_fn)(const void *row, const float *query, int dim);

static float half_to_float(uint16_t half) {
    uint32_t exponent = (half >> 10) & 0x1f, mantissa = half & 0x3ff;
    float value;
    if (exponent == 0)
        value = ldexpf((float)mantissa, -24);
    else if (exponent == 31)
        value = mantissa ? NAN : INFINITY;
    else
        value = ldexpf((float)(mantissa | 0x400), (int)exponent - 25);
    return (half & 0x8000) ? -value : value;
}

static float code_dot_portable(const uint8_t *code, const float *weights, int dim) {
    float sums[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= dim; i += 4)
        for (int j = 0; j < 4; j++) sums[j] += weights[i + j] * (float)code[i + j];
    for (; i < dim; i++) sums[0] += weights[i] * (float)code[i];
    return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

static float half_dot_portable(const void *row, const float *query, int dim) {
    const uint16_t *halves = row;
    float sum = 0;
    for (int i = 0; i < dim; i++) sum += half_to_float(halves[i]) * query[i];
    return sum;
}

static float float_dot_portable(const void *row, const float *query, int dim) {
    const float *values = row;
    float sums[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= dim; i += 4)
        for (int j = 0; j < 4; j++) sums[j] += values[i + j] * query[i + j];
    for (; i < dim; i++) sums[0] += values[i] * query[i];
    return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

#ifdef FUNNEL_X86
__attribute__((target("avx2,fma"))) static float sum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float code_dot_avx2(const uint8_t *code,
                                                              const float *weights, int dim) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(code + i));
        __m256 low = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
        __m256 high = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
        a = _mm256_fmadd_ps(low, _mm256_loadu_ps(weights + i), a);
        b = _mm256_fmadd_ps(high, _mm256_loadu_ps(weights + i + 8), b);
    }
    float sum = sum256(_mm256_add_ps(a, b));
    for (; i < dim; i++) sum += weights[i] * (float)code[i];
    return sum;
}

__attribute__((target("avx2,fma,f16c"))) static float half_dot_avx2(const void *row,
                                                                   const float *query, int dim) {
    const uint16_t *halves = row;
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m256 low = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(halves + i)));
        __m256 high = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(halves + i + 8)));
        a = _mm256_fmadd_ps(low, _mm256_loadu_ps(query + i), a);
        b = _mm256_fmadd_ps(high, _mm256_loadu_ps(query + i + 8), b);
    }
    float sum = sum256(_mm256_add_ps(a, b));
    for (; i < dim; i++) sum += half_to_float(halves[i]) * query[i];
    return sum;
}

__attribute__((target("avx2,fma"))) static float float_dot_avx2(const void *row,
                                                               const float *query, int dim) {
    const float *values = row;
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(values + i), _mm256_loadu_ps(query + i), a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(values + i + 8), _mm256_loadu_ps(query + i + 8), b);
    }
    float sum = sum256(_mm256_add_ps(a, b));
    for (; i < dim; i++) sum += values[i] * query[i];
    return sum;
}

__attribute__((target("avx512f"))) static float code_dot_avx512(const uint8_t *code,
                                                                const float *weights, int dim) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m128i low = _mm_loadu_si128((const __m128i *)(code + i));
        __m128i high = _mm_loadu_si128((const __m128i *)(code + i + 16));
        a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(low)),
                            _mm512_loadu_ps(weights + i), a);
        b = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(high)),
                            _mm512_loadu_ps(weights + i + 16), b);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    for (; i < dim; i++) sum += weights[i] * (float)code[i];
    return sum;
}

__attribute__((target("avx512f"))) static float half_dot_avx512(const void *row,
                                                                const float *query, int dim) {
    const uint16_t *halves = row;
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m512 low = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(halves + i)));
        __m512 high = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(halves + i + 16)));
        a = _mm512_fmadd_ps(low, _mm512_loadu_ps(query + i), a);
        b = _mm512_fmadd_ps(high, _mm512_loadu_ps(query + i + 16), b);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    for (; i < dim; i++) sum += half_to_float(halves[i]) * query[i];
    return sum;
}

__attribute__((target("avx512f"))) static float float_dot_avx512(const void *row,
                                                                 const float *query, int dim) {
    const float *values = row;
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= dim; i += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(values + i), _mm512_loadu_ps(query + i), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(values + i + 16), _mm512_loadu_ps(query + i + 16), b);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    for (; i < dim; i++) sum += values[i] * query[i];
    return sum;
}
#endif

typedef struct {
    const char *name;
    code_dot_fn code_dot;
    row_dot_fn half_dot;
    row_dot_fn float_dot;
} Kernels;

static const Kernels PORTABLE = {"portable", code_dot_portable, half_dot_portable,
                                 float_dot_portable};
#ifdef FUNNEL_X86
static const Kernels AVX2 = {"avx2", code_dot_avx2, half_dot_avx2, float_dot_avx2};
static const Kernels AVX512 = {"avx512", code_dot_avx512, half_dot_avx512, float_dot_avx512};
#endif

static const Kernels *best_kernels(void) {
#ifdef FUNNEL_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return &AVX2;
#endif
    return &PORTABLE;
}

static const Kernels *kernels = &PORTABLE;

/* Asks for every cache line the `bytes` from `start` touch. A span need not start on a line:
 * FAISS's code vector and the rows after the vector file's header do not, so a node's 256 code
 * bytes touch five lines, not four. */
static inline void prefetch_bytes(const void *start, size_t bytes) {
    if (!bytes) return;
    uintptr_t line = (uintptr_t)start & ~(uintptr_t)63, last = (uintptr_t)start + bytes - 1;
    for (; line <= last; line += 64) __builtin_prefetch((const void *)line, 0, 3);
}

/* ---- the walk's heaps ------------------------------------------------------------------------ */

/* A max-heap on distance (the worst on top) of at most `capacity` entries. */
typedef struct {
    float *dis;
    int32_t *ids;
    int size, capacity;
} MaxHeap;

static void heap_push(MaxHeap *h, float dis, int32_t id) {
    int i = h->size++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (h->dis[parent] >= dis) break;
        h->dis[i] = h->dis[parent];
        h->ids[i] = h->ids[parent];
        i = parent;
    }
    h->dis[i] = dis;
    h->ids[i] = id;
}

static void heap_pop(MaxHeap *h) {
    float dis = h->dis[--h->size];
    int32_t id = h->ids[h->size];
    int i = 0, n = h->size;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h->dis[child + 1] > h->dis[child]) child++;
        if (h->dis[child] <= dis) break;
        h->dis[i] = h->dis[child];
        h->ids[i] = h->ids[child];
        i = child;
    }
    if (n) {
        h->dis[i] = dis;
        h->ids[i] = id;
    }
}

/* The beam: the best `capacity` nodes seen, sorted by distance, each marked once expanded. It
 * holds what FAISS's MinimaxHeap holds (an expanded node keeps its place; a full beam drops its
 * worst, expanded or not), kept sorted instead of as a heap, so that the next node to expand is
 * found from a cursor rather than by a scan of the whole beam. */
typedef struct {
    float *dis;
    int32_t *ids;
    uint8_t *expanded;
    int size, capacity, next;
} Beam;

static void beam_push(Beam *b, int32_t id, float dis) {
    if (b->size == b->capacity) {
        if (dis >= b->dis[b->size - 1]) return;
        b->size--;
    }
    int low = 0, high = b->size;
    while (low < high) {
        int middle = (low + high) / 2;
        if (b->dis[middle] <= dis)
            low = middle + 1;
        else
            high = middle;
    }
    int after = b->size - low;
    memmove(b->dis + low + 1, b->dis + low, sizeof(float) * after);
    memmove(b->ids + low + 1, b->ids + low, sizeof(int32_t) * after);
    memmove(b->expanded + low + 1, b->expanded + low, after);
    b->dis[low] = dis;
    b->ids[low] = id;
    b->expanded[low] = 0;
    b->size++;
    if (low < b->next) b->next = low;
}

/* The closest node not yet expanded, now marked expanded (-1 when none is left). */
static int32_t beam_pop_min(Beam *b, float *dis_out) {
    while (b->next < b->size && b->expanded[b->next]) b->next++;
    if (b->next == b->size) return -1;
    b->expanded[b->next] = 1;
    *dis_out = b->dis[b->next];
    return b->ids[b->next];
}

/* The node the next pop would expand if no closer one joins the beam first (-1 when none). */
static int32_t beam_peek(const Beam *b) {
    for (int at = b->next; at < b->size; at++)
        if (!b->expanded[at]) return b->ids[at];
    return -1;
}

/* How many nodes of the beam are closer than `threshold`. */
static int beam_count_below(const Beam *b, float threshold) {
    int low = 0, high = b->size;
    while (low < high) {
        int middle = (low + high) / 2;
        if (b->dis[middle] < threshold)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* ---- the graph ------------------------------------------------------------------------------- */

/* A visited table: node v is visited when marks[v] == mark. Kept in a pool per graph. */
typedef struct Visited {
    uint8_t *marks;
    uint8_t mark;
    struct Visited *next;
} Visited;

/* A graph's links come in one of two layouts. FAISS's: every node's slots for all its levels
 * in `neighbors`, from offsets[node], level l at cum[l] within them, -1 after the last. Packed:
 * level 0 bit-packed per node (see unpack_list) in `packed` from packed_starts[node], and the
 * upper levels of the few nodes that have them in `neighbors`, FAISS's slots from level 1 on,
 * for upper_nodes[i] (ascending) from upper_starts[i]. */
typedef struct {
    PyObject_HEAD
    Py_buffer buffers[11];
    int held;
    const int32_t *neighbors;
    const uint64_t *offsets;     /* FAISS's layout */
    const uint8_t *packed;       /* the packed layout (NULL: FAISS's) */
    const uint32_t *packed_starts, *upper_starts;
    const int32_t *upper_nodes;
    int64_t upper_count;
    const uint8_t *codes; /* 8-bit codes, or float32 values (float_codes) */
    const float *vmin, *vdiff;
    const int64_t *ids;
    const char *rows;
    int64_t nodes, row_count, neighbor_count;
    int32_t entry_point;
    int max_level, prefix_dim, dim, row_bytes, half, float_codes, code_bytes;
    int cum[MAX_LEVELS + 1];
    Visited *pool;
    pthread_mutex_t pool_lock;
} Graph;

/* A buffer's item format without its byte-order mark ("B" when it gives none). */
static const char *item_format(const Py_buffer *view) {
    const char *format = view->format ? view->format : "B";
    return (format[0] == '<' || format[0] == '=' || format[0] == '@') ? format + 1 : format;
}

/* Holds `source`'s buffer (released with the graph) and checks its items; NULL on error. */
static const Py_buffer *take_buffer(Graph *self, PyObject *source, const char *name,
                                    Py_ssize_t itemsize, const char *formats) {
    Py_buffer *view = &self->buffers[self->held];
    if (PyObject_GetBuffer(source, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    self->held++;
    const char *format = item_format(view);
    if (view->itemsize != itemsize || strchr(formats, format[0]) == NULL || format[1]) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes (%s), got '%s'", name,
                     itemsize, formats, view->format ? view->format : "B");
        return NULL;
    }
    return view;
}

static Py_ssize_t count_of(const Py_buffer *view) { return view->len / view->itemsize; }

/* The codes: bytes (8-bit codes) or float32 values (a float32 graph). */
static const Py_buffer *take_codes(Graph *self, PyObject *source) {
    Py_buffer *view = &self->buffers[self->held];
    if (PyObject_GetBuffer(source, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    self->held++;
    const char *format = item_format(view);
    int bytes = view->itemsize == 1 && strchr("BbcX", format[0]) != NULL && !format[1];
    self->float_codes = view->itemsize == 4 && format[0] == 'f' && !format[1];
    if (!bytes && !self->float_codes) {
        PyErr_Format(PyExc_TypeError, "codes: expected bytes or float32 values, got '%s'",
                     view->format ? view->format : "B");
        return NULL;
    }
    return view;
}

/* The packed layout's arrays, checked against each other; -1 on error. */
static int take_packed(Graph *self, PyObject *packed, PyObject *packed_starts,
                       PyObject *upper_nodes, PyObject *upper_starts) {
    const Py_buffer *bytes = take_buffer(self, packed, "packed", 1, "BbcX");
    const Py_buffer *starts =
        bytes ? take_buffer(self, packed_starts, "packed_starts", 4, "IL") : NULL;
    const Py_buffer *nodes = starts ? take_buffer(self, upper_nodes, "upper_nodes", 4, "il") : NULL;
    const Py_buffer *upper = nodes ? take_buffer(self, upper_starts, "upper_starts", 4, "IL") : NULL;
    if (!upper) return -1;
    self->packed = bytes->buf;
    self->packed_starts = starts->buf;
    self->upper_nodes = nodes->buf;
    self->upper_starts = upper->buf;
    self->upper_count = count_of(nodes);
    if (count_of(starts) != self->nodes + 1 || count_of(upper) != self->upper_count + 1 ||
        (int64_t)self->packed_starts[self->nodes] + 8 > count_of(bytes) ||
        (int64_t)self->upper_starts[self->upper_count] > self->neighbor_count) {
        PyErr_SetString(PyExc_ValueError, "the packed links' arrays do not agree in size");
        return -1;
    }
    return 0;
}

static int Graph_init(Graph *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"neighbors", "offsets", "levels", "entry_point", "max_level",
                               "codes", "vmin", "vdiff", "ids", "rows", "packed",
                               "packed_starts", "upper_nodes", "upper_starts", NULL};
    PyObject *neighbors, *offsets, *levels, *codes, *vmin, *vdiff, *ids, *rows;
    PyObject *packed = Py_None, *packed_starts = Py_None, *upper_nodes = Py_None,
             *upper_starts = Py_None;
    int entry_point, max_level;
    if (self->held) {
        PyErr_SetString(PyExc_RuntimeError, "a Graph is made once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOiiOOOOO|$OOOO", keywords, &neighbors,
                                     &offsets, &levels, &entry_point, &max_level, &codes, &vmin,
                                     &vdiff, &ids, &rows, &packed, &packed_starts, &upper_nodes,
                                     &upper_starts))
        return -1;
    int is_packed = packed != Py_None;
    if ((offsets == Py_None) != is_packed) {
        PyErr_SetString(PyExc_ValueError, "expected offsets (FAISS's layout) or packed links");
        return -1;
    }
    const Py_buffer *links = take_buffer(self, neighbors, "neighbors", 4, "iil");
    const Py_buffer *starts = links && !is_packed
                                  ? take_buffer(self, offsets, "offsets", 8, "QLK") : links;
    const Py_buffer *code_view = starts ? take_codes(self, codes) : NULL;
    const Py_buffer *low = code_view ? take_buffer(self, vmin, "vmin", 4, "f") : NULL;
    const Py_buffer *step = low ? take_buffer(self, vdiff, "vdiff", 4, "f") : NULL;
    const Py_buffer *id_view = step ? take_buffer(self, ids, "ids", 8, "qlL") : NULL;
    if (!id_view) return -1;
    Py_buffer *matrix = NULL;
    if (rows != Py_None) {
        matrix = &self->buffers[self->held];
        if (PyObject_GetBuffer(rows, matrix, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0)
            return -1;
        self->held++;
        const char *format = item_format(matrix);
        if (matrix->ndim != 2 || !((matrix->itemsize == 2 && format[0] == 'e') ||
                                   (matrix->itemsize == 4 && format[0] == 'f'))) {
            PyErr_SetString(PyExc_TypeError, "rows: expected a 2-d float16 or float32 matrix");
            return -1;
        }
    }
    PyObject *level_list = PySequence_Fast(levels, "levels: expected a sequence of ints");
    if (!level_list) return -1;
    Py_ssize_t level_count = PySequence_Fast_GET_SIZE(level_list);
    if (level_count < 2 || level_count > MAX_LEVELS + 1 || max_level < 0 ||
        max_level + 2 > level_count) {
        Py_DECREF(level_list);
        PyErr_SetString(PyExc_ValueError, "levels: expected the cumulative neighbours per level");
        return -1;
    }
    for (Py_ssize_t i = 0; i < level_count; i++) {
        long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(level_list, i));
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(level_list);
            return -1;
        }
        self->cum[i] = (int)value;
    }
    Py_DECREF(level_list);

    self->neighbors = links->buf;
    self->codes = code_view->buf;
    self->vmin = low->buf;
    self->vdiff = step->buf;
    self->ids = id_view->buf;
    self->nodes = count_of(id_view);
    self->neighbor_count = count_of(links);
    self->prefix_dim = (int)count_of(low);
    self->code_bytes = self->prefix_dim * (self->float_codes ? 4 : 1);
    if (matrix) {
        self->rows = matrix->buf;
        self->row_count = matrix->shape[0];
        self->dim = (int)matrix->shape[1];
        self->row_bytes = (int)(matrix->shape[1] * matrix->itemsize);
        self->half = matrix->itemsize == 2;
    } else { /* the walk alone: queries at the graph's width, hits scored by their codes */
        self->dim = self->prefix_dim;
    }
    self->entry_point = entry_point;
    self->max_level = max_level;
    if (count_of(step) != self->prefix_dim || self->prefix_dim < 1 ||
        self->prefix_dim > self->dim || count_of(code_view) != self->nodes * self->prefix_dim ||
        (self->nodes && (entry_point < 0 || entry_point >= self->nodes))) {
        PyErr_SetString(PyExc_ValueError, "the graph's arrays do not agree in size");
        return -1;
    }
    if (is_packed) return take_packed(self, packed, packed_starts, upper_nodes, upper_starts);
    self->offsets = starts->buf;
    if (count_of(starts) != self->nodes + 1 ||
        (self->nodes && self->offsets[self->nodes] > (uint64_t)self->neighbor_count)) {
        PyErr_SetString(PyExc_ValueError, "the graph's arrays do not agree in size");
        return -1;
    }
    return 0;
}

static void Graph_dealloc(Graph *self) {
    for (int i = 0; i < self->held; i++) PyBuffer_Release(&self->buffers[i]);
    while (self->pool) {
        Visited *next = self->pool->next;
        free(self->pool->marks);
        free(self->pool);
        self->pool = next;
    }
    pthread_mutex_destroy(&self->pool_lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Graph *self = (Graph *)type->tp_alloc(type, 0);
    if (self) pthread_mutex_init(&self->pool_lock, NULL);
    return (PyObject *)self;
}

static Visited *visited_take(Graph *g) {
    pthread_mutex_lock(&g->pool_lock);
    Visited *table = g->pool;
    if (table) g->pool = table->next;
    pthread_mutex_unlock(&g->pool_lock);
    if (table) return table;
    table = calloc(1, sizeof(Visited));
    if (!table) return NULL;
    table->marks = calloc((size_t)g->nodes + 1, 1);
    if (!table->marks) {
        free(table);
        return NULL;
    }
    return table;
}

static void visited_give(Graph *g, Visited *table) {
    pthread_mutex_lock(&g->pool_lock);
    table->next = g->pool;
    g->pool = table;
    pthread_mutex_unlock(&g->pool_lock);
}

/* Per-call working memory, sized by the call's beam and shortlist. */
typedef struct {
    float *query, *weights, *beam_dis, *found_dis, *scores;
    int32_t *beam_ids, *found_ids, *pending, *links;
    uint8_t *beam_expanded;
    int64_t *found_rows;
    int *order;
} Work;

typedef struct {
    const Graph *g;
    const float *weights;
    float offset;
} Scorer;

static inline float distance(const Scorer *s, int32_t node) {
    const Graph *g = s->g;
    const uint8_t *code = g->codes + (size_t)node * g->code_bytes;
    if (g->float_codes) return -kernels->float_dot(code, s->weights, g->prefix_dim);
    return -(s->offset + kernels->code_dot(code, s->weights, g->prefix_dim));
}

/* How many nodes ahead of the one being scored the walk asks for codes: enough to keep the
 * line fill buffers busy while it scores, few enough that asking does not wait on them. */
#define CODES_AHEAD 8

static inline void prefetch_code(const Graph *g, int32_t node) {
    prefetch_bytes(g->codes + (size_t)node * g->code_bytes, (size_t)g->code_bytes);
}

static inline int is_allowed(const uint8_t *allowed, int32_t node) {
    return !allowed || (allowed[node >> 3] >> (node & 7)) & 1;
}

/* ---- links ----------------------------------------------------------------------------------- */

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t value;
    memcpy(&value, p, sizeof value);
    return value;
}

/* A node's packed level-0 list: its length n, the bit widths f and w (a byte each), then the
 * first neighbour's difference from the node, zigzag-coded in f bits, and each next
 * neighbour's difference from the one before in w bits (the list is sorted ascending), least
 * significant bit first. Nodes numbered for locality have near numbers, so f and w are small.
 * Reads up to 8 bytes past the list (the packed array is padded). Writes at most `limit`
 * neighbours to `out` and returns how many (none for a width over 32: not a packed list). */
static inline int unpack_list(const uint8_t *p, int32_t node, int limit, int32_t *out) {
    int count = p[0] < limit ? p[0] : limit, first_bits = p[1], bits = p[2];
    if (!count || bits > 32 || first_bits > 32) return 0;
    const uint8_t *stream = p + 3;
    uint64_t zigzag = load_u64(stream) & ((1ull << first_bits) - 1);
    int64_t value = (int64_t)node + ((int64_t)(zigzag >> 1) ^ -(int64_t)(zigzag & 1));
    out[0] = (int32_t)value;
    uint64_t mask = (1ull << bits) - 1, at = (uint64_t)first_bits;
    for (int i = 1; i < count; i++, at += (uint64_t)bits) {
        value += (int64_t)((load_u64(stream + (at >> 3)) >> (at & 7)) & mask);
        out[i] = (int32_t)value;
    }
    return count;
}

/* The node's level-0 neighbours: a pointer to them (in place, or unpacked into `scratch`) and
 * their count. */
static inline int level0_links(const Graph *g, int32_t node, int32_t *scratch,
                               const int32_t **out) {
    if (g->packed) {
        *out = scratch;
        return unpack_list(g->packed + g->packed_starts[node], node, g->cum[1] - g->cum[0],
                           scratch);
    }
    const int32_t *around = g->neighbors + g->offsets[node] + g->cum[0];
    int degree = g->cum[1] - g->cum[0], count = 0;
    while (count < degree && around[count] >= 0) count++;
    *out = around;
    return count;
}

/* Asks for the node's level-0 list ahead of level0_links. */
static inline void prefetch_links(const Graph *g, int32_t node) {
    if (g->packed) {
        prefetch_bytes(g->packed + g->packed_starts[node], 128);
        return;
    }
    prefetch_bytes(g->neighbors + g->offsets[node] + g->cum[0],
                   sizeof(int32_t) * (size_t)(g->cum[1] - g->cum[0]));
}

/* The slots of the node's links at `level` >= 1 (-1 after the last): a pointer to the first,
 * and how many slots the level has. The node has that level. */
static inline int upper_links(const Graph *g, int32_t node, int level, const int32_t **out) {
    int slots = g->cum[level + 1] - g->cum[level];
    if (!g->packed) {
        *out = g->neighbors + g->offsets[node] + g->cum[level];
        return slots;
    }
    int64_t low = 0, high = g->upper_count;
    while (low < high) {
        int64_t middle = (low + high) / 2;
        if (g->upper_nodes[middle] < node)
            low = middle + 1;
        else
            high = middle;
    }
    if (low == g->upper_count || g->upper_nodes[low] != node) return 0; /* not an upper node */
    *out = g->neighbors + g->upper_starts[low] + g->cum[level] - g->cum[1];
    return slots;
}

/* The greedy descent through the upper levels from the entry point (FAISS's
 * greedy_update_nearest), then the level-0 walk into `found` (at most `shortlist` nodes).
 * Returns how many were found. */
static int walk(const Graph *g, const Scorer *s, Visited *visited, const uint8_t *allowed,
                int ef_search, int beam_size, int shortlist, Work *w) {
    int32_t nearest = g->entry_point;
    float nearest_dis = distance(s, nearest);
    for (int level = g->max_level; level >= 1; level--) {
        for (;;) {
            int32_t previous = nearest;
            const int32_t *around = NULL;
            int slots = upper_links(g, nearest, level, &around);
            for (int j = 0; j < slots; j++) {
                int32_t v = around[j];
                if (v < 0) break;
                if (v < g->nodes) prefetch_code(g, v);
            }
            for (int j = 0; j < slots; j++) {
                int32_t v = around[j];
                if (v < 0) break;
                if (v >= g->nodes) continue;
                float d = distance(s, v);
                if (d < nearest_dis) {
                    nearest = v;
                    nearest_dis = d;
                }
            }
            if (nearest == previous) break;
        }
    }

    if (++visited->mark == 0) {
        memset(visited->marks, 0, (size_t)g->nodes);
        visited->mark = 1;
    }
    uint8_t mark = visited->mark;
    Beam beam = {w->beam_dis, w->beam_ids, w->beam_expanded, 0, beam_size, 0};
    MaxHeap found = {w->found_dis, w->found_ids, 0, shortlist};
    beam_push(&beam, nearest, nearest_dis);
    if (is_allowed(allowed, nearest)) heap_push(&found, nearest_dis, nearest);
    visited->marks[nearest] = mark;

    /* FAISS's stopping rule: stop once efSearch nodes of the beam are closer than the node to
     * expand. A beam of efSearch nodes holds that node itself, so there the rule cannot hold. */
    int may_stop = beam_size > ef_search;
    for (;;) {
        float d0 = 0;
        int32_t v0 = beam_pop_min(&beam, &d0);
        if (v0 < 0 || (may_stop && beam_count_below(&beam, d0) >= ef_search)) break;
        const int32_t *around = NULL;
        int count = level0_links(g, v0, w->links, &around);
        /* The next node to expand is most often the one the beam holds now: its neighbour list
         * is asked for while this node's neighbours are scored (where it starts first, so that
         * reading it below waits less). */
        int32_t next = beam_peek(&beam);
        if (next >= 0)
            __builtin_prefetch(g->packed ? (const void *)(g->packed_starts + next)
                                         : (const void *)(g->offsets + next), 0, 3);
        for (int j = 0; j < count; j++)
            if (around[j] < g->nodes) __builtin_prefetch(visited->marks + around[j], 0, 3);
        int pending = 0;
        for (int j = 0; j < count; j++) {
            int32_t v = around[j];
            if (v >= g->nodes || visited->marks[v] == mark) continue;
            visited->marks[v] = mark;
            w->pending[pending++] = v;
        }
        for (int j = 0; j < pending && j < CODES_AHEAD; j++) prefetch_code(g, w->pending[j]);
        if (next >= 0) prefetch_links(g, next);
        for (int j = 0; j < pending; j++) {
            int32_t v = w->pending[j];
            if (j + CODES_AHEAD < pending) prefetch_code(g, w->pending[j + CODES_AHEAD]);
            float d = distance(s, v);
            if (is_allowed(allowed, v)) {
                if (found.size < shortlist)
                    heap_push(&found, d, v);
                else if (d < found.dis[0]) {
                    heap_pop(&found);
                    heap_push(&found, d, v);
                }
            }
            beam_push(&beam, v, d);
        }
    }
    return found.size;
}

/* One query: normalise it, walk, re-rank, write the k best (row ids, scores) into out. */
static void search_one(const Graph *g, const float *query, Visited *visited, const uint8_t *allowed,
                       int k, int shortlist, int ef_search, Work *w, float *out_scores,
                       int64_t *out_rows) {
    double norm = 0;
    for (int i = 0; i < g->dim; i++) norm += (double)query[i] * query[i];
    float scale = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (int i = 0; i < g->dim; i++) w->query[i] = query[i] * scale;
    double prefix_norm = 0;
    for (int i = 0; i < g->prefix_dim; i++) prefix_norm += (double)w->query[i] * w->query[i];
    float prefix_scale = prefix_norm > 0 ? (float)(1.0 / sqrt(prefix_norm)) : 0.0f;
    float offset = 0;
    for (int i = 0; i < g->prefix_dim; i++) {
        float q = w->query[i] * prefix_scale, step = g->vdiff[i] / 255.0f;
        w->weights[i] = g->float_codes ? q : q * step;
        if (!g->float_codes) offset += q * (g->vmin[i] + 0.5f * step);
    }
    Scorer scorer = {g, w->weights, offset};
    int beam_size = ef_search > shortlist ? ef_search : shortlist;
    int found = g->nodes ? walk(g, &scorer, visited, allowed, ef_search, beam_size, shortlist, w)
                         : 0;

    int kept = 0;
    if (!g->rows) { /* the walk alone: the codes' scores */
        for (int i = 0; i < found; i++) {
            int64_t row = g->ids[w->found_ids[i]];
            if (row < 0) continue;
            w->scores[kept] = -w->found_dis[i];
            w->found_rows[kept++] = row;
        }
    } else {
        for (int i = 0; i < found; i++) {
            int64_t row = g->ids[w->found_ids[i]];
            if (row < 0 || row >= g->row_count) continue;
            prefetch_bytes(g->rows + (size_t)row * g->row_bytes, (size_t)g->row_bytes);
            w->found_rows[kept++] = row;
        }
        row_dot_fn dot = g->half ? kernels->half_dot : kernels->float_dot;
        for (int i = 0; i < kept; i++)
            w->scores[i] =
                dot(g->rows + (size_t)w->found_rows[i] * g->row_bytes, w->query, g->dim);
    }
    /* The k best by partial selection (k and the shortlist are small). */
    for (int i = 0; i < kept; i++) w->order[i] = i;
    int best = k < kept ? k : kept;
    for (int i = 0; i < best; i++) {
        int top = i;
        for (int j = i + 1; j < kept; j++) {
            float a = w->scores[w->order[j]], b = w->scores[w->order[top]];
            if (a > b || (a == b && w->found_rows[w->order[j]] < w->found_rows[w->order[top]]))
                top = j;
        }
        int swap = w->order[i];
        w->order[i] = w->order[top];
        w->order[top] = swap;
        out_scores[i] = w->scores[w->order[i]];
        out_rows[i] = w->found_rows[w->order[i]];
    }
    for (int i = best; i < k; i++) {
        out_scores[i] = -INFINITY;
        out_rows[i] = -1;
    }
}

static void work_free(Work *w) {
    free(w->query);
    free(w->weights);
    free(w->beam_dis);
    free(w->found_dis);
    free(w->scores);
    free(w->beam_ids);
    free(w->beam_expanded);
    free(w->found_ids);
    free(w->pending);
    free(w->links);
    free(w->found_rows);
    free(w->order);
}

static int work_alloc(Work *w, const Graph *g, int beam_size, int shortlist) {
    int degree = g->cum[1] - g->cum[0];
    w->query = malloc(sizeof(float) * g->dim);
    w->weights = malloc(sizeof(float) * g->prefix_dim);
    w->beam_dis = malloc(sizeof(float) * beam_size);
    w->beam_ids = malloc(sizeof(int32_t) * beam_size);
    w->beam_expanded = malloc(beam_size);
    w->found_dis = malloc(sizeof(float) * shortlist);
    w->found_ids = malloc(sizeof(int32_t) * shortlist);
    w->scores = malloc(sizeof(float) * shortlist);
    w->found_rows = malloc(sizeof(int64_t) * shortlist);
    w->order = malloc(sizeof(int) * shortlist);
    w->pending = malloc(sizeof(int32_t) * (degree > 0 ? degree : 1));
    w->links = malloc(sizeof(int32_t) * (degree > 0 ? degree : 1));
    return w->query && w->weights && w->beam_dis && w->beam_ids && w->beam_expanded && w->found_dis &&
           w->found_ids && w->scores && w->found_rows && w->order && w->pending && w->links;
}

static int writable(PyObject *source, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count,
                    const char *name) {
    if (PyObject_GetBuffer(source, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    if (view->itemsize != itemsize || view->len != itemsize * count) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", name, count,
                     itemsize);
        return -1;
    }
    return 0;
}

static PyObject *Graph_search(Graph *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"queries", "k", "shortlist", "ef_search", "allowed", "scores",
                               "rows", NULL};
    PyObject *queries, *allowed, *scores, *rows;
    int k, shortlist, ef_search;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OiiiOOO", keywords, &queries, &k, &shortlist,
                                     &ef_search, &allowed, &scores, &rows))
        return NULL;
    if (k < 1 || shortlist < k || ef_search < 1) {
        PyErr_SetString(PyExc_ValueError, "expected 1 <= k <= shortlist and ef_search >= 1");
        return NULL;
    }
    Py_buffer query_view, allowed_view = {0}, score_view, row_view;
    if (PyObject_GetBuffer(queries, &query_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    Py_ssize_t count = query_view.len / ((Py_ssize_t)sizeof(float) * self->dim);
    if (query_view.itemsize != 4 || strcmp(item_format(&query_view), "f") != 0 ||
        query_view.len != count * (Py_ssize_t)sizeof(float) * self->dim) {
        PyBuffer_Release(&query_view);
        PyErr_Format(PyExc_ValueError, "queries: expected float32 rows of %d values", self->dim);
        return NULL;
    }
    if (writable(scores, &score_view, 4, count * k, "scores") < 0) {
        PyBuffer_Release(&query_view);
        return NULL;
    }
    if (writable(rows, &row_view, 8, count * k, "rows") < 0) {
        PyBuffer_Release(&query_view);
        PyBuffer_Release(&score_view);
        return NULL;
    }
    int has_allowed = allowed != Py_None;
    if (has_allowed &&
        (PyObject_GetBuffer(allowed, &allowed_view, PyBUF_C_CONTIGUOUS) < 0 ||
         allowed_view.len < (self->nodes + 7) / 8)) {
        if (!PyErr_Occurred()) {
            PyBuffer_Release(&allowed_view);
            PyErr_SetString(PyExc_ValueError, "allowed: expected a bit for every node");
        }
        PyBuffer_Release(&query_view);
        PyBuffer_Release(&score_view);
        PyBuffer_Release(&row_view);
        return NULL;
    }

    int beam_size = ef_search > shortlist ? ef_search : shortlist;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    Work work = {0};
    Visited *visited = self->nodes ? visited_take(self) : NULL;
    if ((self->nodes && !visited) || !work_alloc(&work, self, beam_size, shortlist)) {
        failed = 1;
    } else {
        const float *all = query_view.buf;
        for (Py_ssize_t i = 0; i < count; i++)
            search_one(self, all + i * self->dim, visited,
                       has_allowed ? allowed_view.buf : NULL, k, shortlist, ef_search, &work,
                       (float *)score_view.buf + i * k, (int64_t *)row_view.buf + i * k);
    }
    work_free(&work);
    if (visited) visited_give(self, visited);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&query_view);
    PyBuffer_Release(&score_view);
    PyBuffer_Release(&row_view);
    if (has_allowed) PyBuffer_Release(&allowed_view);
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef Graph_methods[] = {
    {"search", (PyCFunction)(void (*)(void))Graph_search, METH_VARARGS | METH_KEYWORDS,
     "search(queries, k, shortlist, ef_search, allowed, scores, rows): the funnel for each "
     "query (float32 rows of the full dimension, any norm), writing the k best row ids and "
     "their inner products with the unit query into rows (int64) and scores (float32), best "
     "first, -1 and -inf where fewer were found. allowed: None, or a bitmap over the graph's "
     "nodes (bit v of byte v // 8, least significant first) of those that may be returned."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GraphType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "index._native_funnel.Graph",
    .tp_doc = "Graph(neighbors, offsets, levels, entry_point, max_level, codes, vmin, vdiff, ids, "
              "rows): a view of a FAISS HNSW graph of 8-bit codes or float32 values (its "
              "arrays, read in place: keep the graph alive and unchanged while this is used) "
              "and the full rows its node ids (ids) point into; rows None: the walk alone, "
              "queries at the graph's width, hits scored by their codes.",
    .tp_basicsize = sizeof(Graph),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Graph_new,
    .tp_init = (initproc)Graph_init,
    .tp_dealloc = (destructor)Graph_dealloc,
    .tp_methods = Graph_methods,
};

/* ---- packing links ---------------------------------------------------------------------------- */

static int bit_length(uint64_t value) { return value ? 64 - __builtin_clzll(value) : 0; }

/* One node's level-0 list (-1 after the last of `width` slots) sorted into `sorted`, and the
 * values unpack_list reads back into `values`; returns the count, and the bit widths of the
 * first value and of the others in `first_bits` and `bits`. */
static int list_values(const int32_t *slots, int width, int64_t node, int32_t *sorted,
                       uint64_t *values, int *first_bits, int *bits) {
    int count = 0;
    while (count < width && slots[count] >= 0) {
        int32_t v = slots[count];
        int at = count++;
        while (at > 0 && sorted[at - 1] > v) {
            sorted[at] = sorted[at - 1];
            at--;
        }
        sorted[at] = v;
    }
    uint64_t widest = 0;
    for (int i = 0; i < count; i++) {
        int64_t step = i ? (int64_t)sorted[i] - sorted[i - 1] : (int64_t)sorted[0] - node;
        values[i] = i ? (uint64_t)step : ((uint64_t)step << 1) ^ (uint64_t)(step >> 63);
        if (i) widest |= values[i];
    }
    *first_bits = count ? bit_length(values[0]) : 0;
    *bits = bit_length(widest);
    return count;
}

static Py_ssize_t packed_bytes(int count, int first_bits, int bits) {
    return 3 + ((Py_ssize_t)first_bits + (Py_ssize_t)(count > 1 ? count - 1 : 0) * bits + 7) / 8;
}

static PyObject *pack_links(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"neighbors", "offsets", "width", "starts", NULL};
    PyObject *neighbors, *offsets, *starts;
    int width;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOiO", keywords, &neighbors, &offsets,
                                     &width, &starts))
        return NULL;
    if (width < 1 || width > 255) {
        PyErr_SetString(PyExc_ValueError, "width: expected 1 to 255 level-0 slots");
        return NULL;
    }
    Py_buffer links, where, out;
    if (PyObject_GetBuffer(neighbors, &links, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(offsets, &where, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&links);
        return NULL;
    }
    Py_ssize_t nodes = where.len / 8 - 1;
    PyObject *packed = NULL;
    if (nodes < 0 || writable(starts, &out, 4, nodes + 1, "starts") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "offsets: expected nodes + 1");
        PyBuffer_Release(&links);
        PyBuffer_Release(&where);
        return NULL;
    }
    const int32_t *slots = links.buf;
    const uint64_t *offset = where.buf;
    uint32_t *start = out.buf;
    int32_t sorted[255];
    uint64_t values[255];
    int first_bits = 0, bits = 0;
    Py_ssize_t total = 0;
    for (Py_ssize_t node = 0; node < nodes; node++) {
        if (offset[node] + (uint64_t)width > (uint64_t)(links.len / 4)) {
            PyErr_SetString(PyExc_ValueError, "offsets: past the end of neighbors");
            goto done;
        }
        start[node] = (uint32_t)total;
        int count =
            list_values(slots + offset[node], width, node, sorted, values, &first_bits, &bits);
        total += packed_bytes(count, first_bits, bits);
        if (total > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "too many links to pack (over 4 GiB)");
            goto done;
        }
    }
    start[nodes] = (uint32_t)total;
    packed = PyBytes_FromStringAndSize(NULL, total + 8); /* padded for unpack_list's reads */
    if (!packed) goto done;
    uint8_t *bytes = (uint8_t *)PyBytes_AS_STRING(packed);
    memset(bytes, 0, (size_t)total + 8);
    for (Py_ssize_t node = 0; node < nodes; node++) {
        int count =
            list_values(slots + offset[node], width, node, sorted, values, &first_bits, &bits);
        uint8_t *p = bytes + start[node];
        p[0] = (uint8_t)count;
        p[1] = (uint8_t)first_bits;
        p[2] = (uint8_t)bits;
        uint64_t at = 0;
        for (int i = 0; i < count; i++) { /* a value (<= 32 bits) shifted by < 8 fits a word */
            uint64_t word = load_u64(p + 3 + (at >> 3)) | values[i] << (at & 7);
            memcpy(p + 3 + (at >> 3), &word, sizeof word);
            at += (uint64_t)(i ? bits : first_bits);
        }
    }
done:
    PyBuffer_Release(&links);
    PyBuffer_Release(&where);
    PyBuffer_Release(&out);
    return packed;
}

static PyObject *unpack_links(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"packed", "starts", "offsets", "width", "neighbors", NULL};
    PyObject *packed, *starts, *offsets, *neighbors;
    int width;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOiO", keywords, &packed, &starts, &offsets,
                                     &width, &neighbors))
        return NULL;
    Py_buffer bytes, where, offset_view, out;
    if (PyObject_GetBuffer(packed, &bytes, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(starts, &where, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&bytes);
        return NULL;
    }
    if (PyObject_GetBuffer(offsets, &offset_view, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&bytes);
        PyBuffer_Release(&where);
        return NULL;
    }
    if (PyObject_GetBuffer(neighbors, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bytes);
        PyBuffer_Release(&where);
        PyBuffer_Release(&offset_view);
        return NULL;
    }
    Py_ssize_t nodes = where.len / 4 - 1;
    const uint32_t *start = where.buf;
    const uint64_t *offset = offset_view.buf;
    int failed = width < 1 || width > 255 || nodes < 0 || offset_view.len / 8 != nodes + 1 ||
                 (nodes >= 0 && (Py_ssize_t)start[nodes] + 8 > bytes.len);
    for (Py_ssize_t node = 0; !failed && node < nodes; node++) {
        if (offset[node] + (uint64_t)width > (uint64_t)(out.len / 4) || start[node] > start[nodes]) {
            failed = 1;
            break;
        }
        int32_t *slots = (int32_t *)out.buf + offset[node];
        int count = unpack_list((const uint8_t *)bytes.buf + start[node], (int32_t)node, width,
                                slots);
        for (int j = count; j < width; j++) slots[j] = -1;
    }
    PyBuffer_Release(&bytes);
    PyBuffer_Release(&where);
    PyBuffer_Release(&offset_view);
    PyBuffer_Release(&out);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, "the packed links do not fit the offsets given");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *use_kernels(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    const Kernels *chosen = NULL;
    if (strcmp(name, "portable") == 0) chosen = &PORTABLE;
    if (strcmp(name, "best") == 0) chosen = best_kernels();
#ifdef FUNNEL_X86
    if (strcmp(name, "avx2") == 0 && best_kernels() != &PORTABLE) chosen = &AVX2;
    if (strcmp(name, "avx512") == 0 && best_kernels() == &AVX512) chosen = &AVX512;
#endif
    if (!chosen) {
        PyErr_Format(PyExc_ValueError, "kernels %R: not available on this CPU", arg);
        return NULL;
    }
    kernels = chosen;
    return PyUnicode_FromString(kernels->name);
}

static PyObject *kernel_name(PyObject *module, PyObject *unused) {
    return PyUnicode_FromString(kernels->name);
}

static PyMethodDef module_methods[] = {
    {"kernels", kernel_name, METH_NOARGS, "The kernels in use: avx512, avx2 or portable."},
    {"pack_links", (PyCFunction)(void (*)(void))pack_links, METH_VARARGS | METH_KEYWORDS,
     "pack_links(neighbors, offsets, width, starts): FAISS's level-0 links (int32 slots, each "
     "node's `width` of them from offsets[node], uint64, nodes + 1) bit-packed per node, as "
     "bytes padded by 8; writes where each node's list starts (and the end) into starts "
     "(uint32, nodes + 1)."},
    {"unpack_links", (PyCFunction)(void (*)(void))unpack_links, METH_VARARGS | METH_KEYWORDS,
     "unpack_links(packed, starts, offsets, width, neighbors): the inverse: writes each node's "
     "level-0 list back into FAISS's slots of neighbors (int32, writable) from offsets[node], "
     "-1 after the last of `width`."},
    {"use_kernels", use_kernels, METH_O,
     "use_kernels(name): use these kernels (best, avx512, avx2, portable) from now on, for "
     "every graph; returns the name in use. For tests that compare them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "index._native_funnel",
    "The C2F funnel (HNSW walk over 8-bit codes, exact re-rank) in one native call.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__native_funnel(void) {
    kernels = best_kernels();
    if (PyType_Ready(&GraphType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&GraphType);
    if (PyModule_AddObject(m, "Graph", (PyObject *)&GraphType) < 0) {
        Py_DECREF(&GraphType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "SOURCE_DIGEST", SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

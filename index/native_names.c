/* Naming a search's hits in one C call: the row → document id table of
 * index/embedded/row_names.py read in place, one Python object made per named hit.
 *
 * named(slots, ids, rows, values, make) -> list of lists
 *   slots:  int64 per row id, start << 16 | length of the row's id in `ids` (0: no name);
 *   ids:    the ids' UTF-8 bytes (surrogates passed through);
 *   rows:   int64 (queries, k) row ids as a search returns them (-1: none);
 *   values: a (queries, k) float32 or int64 matrix, one value per row;
 *   make:   called as make(id, value) for each row that has a name, in order.
 * Rows without a name, and rows outside the table, are left out. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LENGTH_BITS 16
#define LENGTH_MASK ((1 << LENGTH_BITS) - 1)

static int item_is(const Py_buffer *view, const char *codes) {
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    return format[0] && strchr(codes, format[0]) != NULL && format[1] == 0;
}

static PyObject *named(PyObject *module, PyObject *args) {
    PyObject *sources[4], *make, *answer = NULL;
    Py_buffer views[4];
    int held = 0;
    if (!PyArg_ParseTuple(args, "OOOOO:named", &sources[0], &sources[1], &sources[2],
                          &sources[3], &make))
        return NULL;
    for (; held < 4; held++)
        if (PyObject_GetBuffer(sources[held], &views[held],
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0)
            goto done;
    const Py_buffer *slots = &views[0], *ids = &views[1], *rows = &views[2], *values = &views[3];
    int floats = values->itemsize == 4 && item_is(values, "f");
    if (!item_is(slots, "qlL") || slots->itemsize != 8 || !item_is(ids, "Bb") ||
        !item_is(rows, "qlL") || rows->itemsize != 8 || rows->ndim != 2 ||
        !(floats || (values->itemsize == 8 && item_is(values, "qlL"))) || values->ndim != 2 ||
        values->shape[0] != rows->shape[0] || values->shape[1] != rows->shape[1]) {
        PyErr_SetString(PyExc_ValueError, "named: slots of int64, ids of bytes, rows a 2-d int64 "
                                          "matrix, values float32 or int64 of the same shape");
        goto done;
    }
    if (!PyCallable_Check(make)) {
        PyErr_SetString(PyExc_TypeError, "named: make must be callable");
        goto done;
    }
    int64_t size = slots->len / 8;
    Py_ssize_t queries = rows->shape[0], k = rows->shape[1];
    const int64_t *slot = slots->buf, *row = rows->buf;
    const char *bytes = ids->buf;
    answer = PyList_New(queries);
    for (Py_ssize_t q = 0; answer && q < queries; q++) {
        PyObject *hits = PyList_New(0);
        if (!hits) goto fail;
        PyList_SET_ITEM(answer, q, hits);
        for (Py_ssize_t j = 0; j < k; j++) {
            Py_ssize_t cell = q * k + j;
            int64_t r = row[cell];
            if (r < 0 || r >= size || !slot[r]) continue;
            int64_t start = slot[r] >> LENGTH_BITS, length = slot[r] & LENGTH_MASK;
            if (start + length > ids->len) {
                PyErr_SetString(PyExc_ValueError, "named: a row's id lies outside the ids' bytes");
                goto fail;
            }
            PyObject *name = PyUnicode_DecodeUTF8(bytes + start, length, "surrogatepass");
            PyObject *value = floats ? PyFloat_FromDouble(((const float *)values->buf)[cell])
                                     : PyLong_FromLongLong(((const int64_t *)values->buf)[cell]);
            PyObject *hit = name && value ? PyObject_CallFunctionObjArgs(make, name, value, NULL)
                                          : NULL;
            Py_XDECREF(name);
            Py_XDECREF(value);
            if (!hit) goto fail;
            int appended = PyList_Append(hits, hit);
            Py_DECREF(hit);
            if (appended < 0) goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(answer);
done:
    while (held > 0) PyBuffer_Release(&views[--held]);
    return answer;
}

static PyMethodDef methods[] = {
    {"named", named, METH_VARARGS, "Name a search's hits (see the file's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "index._native_names",
                                    "Naming a search's hits in one C call.", -1, methods};

PyMODINIT_FUNC PyInit__native_names(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_DIGEST", SOURCE_DIGEST) < 0) Py_CLEAR(m);
    return m;
}

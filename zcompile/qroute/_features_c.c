/* The hot loops of a feature row (zcompile/qroute/features.py) in C; the same results as its
 * Python reference path, which runs when this extension is not built.
 *
 * count(row, text, first, dim) -> int
 *     Adds 1.0 to row[first + crc32(token) % dim] for every hashed token of `text` (feature
 *     version 2, as `features.text_columns`) and returns the number of tokens. Words are maximal
 *     runs of [A-Za-z0-9_]: of a text longer than 2 * 400 characters, the first 16 words of its
 *     first 400 characters and the last 16 of its last 400; else all its words, the first and last
 *     16 when there are more than 32. Tokens: every word lower-cased, every pair of consecutive
 *     words joined by a space, every word's shape ("~" and its first 12 characters with A-Z -> A,
 *     a-z -> a, 0-9 -> 9) and "^" with the first word. Words are ASCII, so the crc32 of a token's
 *     UTF-8 bytes is that of its characters.
 *
 * put(row, ones, cols, nums) -> None
 *     row[i] = 1.0 for each i in the list `ones`, then row[cols[k]] = nums[k] (floats, rounded to
 *     float32 as numpy rounds them; beyond float32's range, infinity).
 *
 * `row` is a writable C-contiguous float32 buffer (a numpy array); an index outside it is a
 * ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#define WINDOW 400
#define HALF 16 /* MAX_WORDS / 2 */
#define CUT 12

static uint32_t TABLE[256];

static void make_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        TABLE[n] = c;
    }
}

/* one byte into a crc32 register (zlib's: start at 0xFFFFFFFF, invert at the end) */
static inline uint32_t upd(uint32_t s, unsigned char b) { return TABLE[(s ^ b) & 0xff] ^ (s >> 8); }

static inline int is_word(Py_UCS4 c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static inline unsigned char lower(Py_UCS4 c) { return (unsigned char)((c >= 'A' && c <= 'Z') ? c + 32 : c); }

static inline unsigned char shape(Py_UCS4 c) {
    if (c >= 'A' && c <= 'Z') return 'A';
    if (c >= 'a' && c <= 'z') return 'a';
    if (c >= '0' && c <= '9') return '9';
    return (unsigned char)c; /* '_' */
}

typedef struct { Py_ssize_t start, end; } span;

/* Inlined with a constant `kind` at each call, so every PyUnicode_READ is a plain load. */
#define READ(i) PyUnicode_READ(kind, data, (i))

/* The first `cap` words of text[lo:hi]; *stop is where the scan stopped. */
static inline __attribute__((always_inline)) int
scan_forward(int kind, const void *data, Py_ssize_t lo, Py_ssize_t hi, span *out, int cap, Py_ssize_t *stop) {
    int n = 0;
    Py_ssize_t i = lo;
    while (n < cap) {
        while (i < hi && !is_word(READ(i))) i++;
        if (i >= hi) break;
        out[n].start = i;
        while (i < hi && is_word(READ(i))) i++;
        out[n++].end = i;
    }
    *stop = i;
    return n;
}

/* The last `cap` (<= HALF) words of text[lo:hi], in text order. */
static inline __attribute__((always_inline)) int
scan_backward(int kind, const void *data, Py_ssize_t lo, Py_ssize_t hi, span *out, int cap) {
    span rev[HALF];
    int n = 0;
    Py_ssize_t i = hi;
    while (n < cap) {
        while (i > lo && !is_word(READ(i - 1))) i--;
        if (i <= lo) break;
        rev[n].end = i;
        while (i > lo && is_word(READ(i - 1))) i--;
        rev[n++].start = i;
    }
    for (int k = 0; k < n; k++) out[k] = rev[n - 1 - k];
    return n;
}

static inline __attribute__((always_inline)) int
hash_text(int kind, const void *data, Py_ssize_t len, float *row, uint32_t dim) {
    span words[2 * HALF];
    Py_ssize_t stop;
    int nw;
    if (len > 2 * WINDOW) {
        nw = scan_forward(kind, data, 0, WINDOW, words, HALF, &stop);
        nw += scan_backward(kind, data, len - WINDOW, len, words + nw, HALF);
    } else {
        nw = scan_forward(kind, data, 0, len, words, HALF, &stop);
        nw += scan_backward(kind, data, stop, len, words + nw, HALF);
    }
    uint32_t prev = 0; /* the previous word's lower-cased register */
    for (int w = 0; w < nw; w++) {
        uint32_t s = 0xFFFFFFFFu, t = upd(0xFFFFFFFFu, '~');
        uint32_t b = upd(prev, ' '); /* the bigram of the previous word and this one */
        for (Py_ssize_t i = words[w].start; i < words[w].end; i++) {
            Py_UCS4 c = READ(i);
            s = upd(s, lower(c));
            b = upd(b, lower(c));
            if (i - words[w].start < CUT) t = upd(t, shape(c));
        }
        row[(~s) % dim] += 1.0f;
        row[(~t) % dim] += 1.0f;
        if (w > 0) row[(~b) % dim] += 1.0f;
        prev = s;
    }
    if (nw > 0) {
        uint32_t s = upd(0xFFFFFFFFu, '^');
        for (Py_ssize_t i = words[0].start; i < words[0].end; i++) s = upd(s, lower(READ(i)));
        row[(~s) % dim] += 1.0f;
    }
    return nw ? 3 * nw : 0; /* nw words, nw shapes, nw - 1 bigrams, the first word */
}

static int row_buffer(PyObject *obj, Py_buffer *buf) {
    if (PyObject_GetBuffer(obj, buf, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (buf->itemsize != 4 || buf->format == NULL || strcmp(buf->format, "f") != 0) {
        PyBuffer_Release(buf);
        PyErr_SetString(PyExc_ValueError, "row must be a contiguous float32 buffer");
        return -1;
    }
    return 0;
}

static PyObject *count(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "count(row, text, first, dim) takes 4 arguments");
        return NULL;
    }
    PyObject *text = args[1];
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "count: text must be a str");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(args[2]), dim = PyLong_AsSsize_t(args[3]);
    if ((first == -1 || dim == -1) && PyErr_Occurred()) return NULL;
    Py_buffer buf;
    if (row_buffer(args[0], &buf) < 0) return NULL;
    if (first < 0 || dim <= 0 || dim > UINT32_MAX || first + dim > buf.len / 4) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "count: columns first .. first + dim are not all in the row");
        return NULL;
    }
    float *row = (float *)buf.buf + first;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    int n;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND: n = hash_text(PyUnicode_1BYTE_KIND, data, len, row, (uint32_t)dim); break;
    case PyUnicode_2BYTE_KIND: n = hash_text(PyUnicode_2BYTE_KIND, data, len, row, (uint32_t)dim); break;
    default: n = hash_text(PyUnicode_4BYTE_KIND, data, len, row, (uint32_t)dim); break;
    }
    PyBuffer_Release(&buf);
    return PyLong_FromLong(n);
}

/* The index held by list[k], checked against the row's length n; -1 with an exception set. */
static Py_ssize_t index_at(PyObject *list, Py_ssize_t k, Py_ssize_t n) {
    Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(list, k));
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || i >= n) {
        PyErr_Format(PyExc_ValueError, "put: column %zd is outside the row (%zd columns)", i, n);
        return -1;
    }
    return i;
}

static PyObject *put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "put(row, ones, cols, nums) takes 4 arguments");
        return NULL;
    }
    PyObject *ones = args[1], *cols = args[2], *nums = args[3];
    if (!PyList_Check(ones) || !PyList_Check(cols) || !PyList_Check(nums) ||
        PyList_GET_SIZE(cols) != PyList_GET_SIZE(nums)) {
        PyErr_SetString(PyExc_TypeError, "put: ones, cols and nums must be lists (cols and nums of one length)");
        return NULL;
    }
    Py_buffer buf;
    if (row_buffer(args[0], &buf) < 0) return NULL;
    float *row = (float *)buf.buf;
    Py_ssize_t n = buf.len / 4;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ones); k++) {
        Py_ssize_t i = index_at(ones, k, n);
        if (i < 0) goto fail;
        row[i] = 1.0f;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(cols); k++) {
        Py_ssize_t i = index_at(cols, k, n);
        if (i < 0) goto fail;
        double v = PyFloat_AsDouble(PyList_GET_ITEM(nums, k));
        if (v == -1.0 && PyErr_Occurred()) goto fail;
        /* out of float32's range: infinity, as numpy's cast gives (it also warns) */
        row[i] = v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
    }
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&buf);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"count", (PyCFunction)(void (*)(void))count, METH_FASTCALL,
     "count(row, text, first, dim) -> number of tokens: add each hashed token of `text` to its column."},
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(row, ones, cols, nums): row[ones] = 1.0, then row[cols] = nums."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_features_c",
                                    "The hot loops of a feature row (features.py) in C.", -1, METHODS};

/* Bumped with every change to what these functions compute or take: features.py uses a build of
 * another revision (a stale in-place build) as if the extension were not built. */
#define REVISION 1

PyMODINIT_FUNC PyInit__features_c(void) {
    make_table();
    PyObject *m = PyModule_Create(&MODULE);
    if (m != NULL && PyModule_AddIntConstant(m, "REVISION", REVISION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

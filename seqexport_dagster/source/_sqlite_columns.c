/* A SQLite window read into column buffers, for Parquet parts (source/sqlite_read.py).

Why C: the `sqlite3` module makes a Python tuple and a Python object per value, which costs more per
million rows (2.2-2.6 CPU-s) than DuckDB's whole read and Parquet write. This module steps the
statement and copies each value straight into Arrow's layout (validity bits, int32 offsets and UTF-8
bytes for text; int64 for integers): about 0.4 CPU-s per million rows of email events.

One SQLite per process: this module links no SQLite. `bind` gives it the addresses of the functions
of the library Python's own `_sqlite3` module uses (sqlite_read.py looks them up with ctypes), so its
connections and the `sqlite3` module's are one library's, which sees all of the process's locks.
Two copies of SQLite in one process on one file do not (source/reader.py tells what that did).

What it refuses is never converted: a value whose storage class is not the column's kind (TEXT or
NULL for 's', INTEGER or NULL for 'i'; a REAL, a BLOB, a text in an integer column) or a text that is
not strict UTF-8 (what the `sqlite3` module would fail to decode) ends the batch before its row, and
the batch says "not plain": the caller reads the rest of the window as rows, whose checks name it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

#define SQLITE_OK 0
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_INTEGER 1
#define SQLITE_TEXT 3
#define SQLITE_NULL 5
#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define SQLITE_TRANSIENT ((void (*)(void *)) - 1)

/* The functions used, as the C API declares them (stable since SQLite 3.7). */
static struct {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close_v2)(sqlite3 *);
    int (*busy_timeout)(sqlite3 *, int);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_int64)(sqlite3_stmt *, int, int64_t);
    int (*step)(sqlite3_stmt *);
    int (*column_count)(sqlite3_stmt *);
    int (*column_type)(sqlite3_stmt *, int);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    int64_t (*column_int64)(sqlite3_stmt *, int);
    int (*finalize)(sqlite3_stmt *);
    const char *(*errmsg)(sqlite3 *);
} api;
static int bound = 0;

static const char *const NAMES[] = {
    "sqlite3_open_v2",     "sqlite3_close_v2",   "sqlite3_busy_timeout", "sqlite3_prepare_v2",
    "sqlite3_bind_text",   "sqlite3_bind_int64", "sqlite3_step",         "sqlite3_column_count",
    "sqlite3_column_type", "sqlite3_column_text", "sqlite3_column_bytes", "sqlite3_column_int64",
    "sqlite3_finalize",    "sqlite3_errmsg",
};
#define N_FUNCTIONS ((Py_ssize_t)(sizeof(NAMES) / sizeof(NAMES[0])))

static PyObject *SourceError; /* a SQLite error: the caller makes it a RetryableError */

/* Strict UTF-8 as Python's decoder reads it: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && s[i + 1] > 0x9F) return 0; /* a surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] > 0x8F) return 0; /* past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    PyObject_HEAD sqlite3 *db;
    sqlite3_stmt *stmt;
    int ncol;
    char *kinds; /* 's' or 'i' per column */
    int finished; /* done, failed or not plain: nothing more to read */
    int busy; /* a fetch is running (the GIL is released): another call from another thread is refused */
} Reader;

static void reader_release(Reader *self) {
    if (self->stmt) {
        api.finalize(self->stmt);
        self->stmt = NULL;
    }
    if (self->db) {
        api.close_v2(self->db);
        self->db = NULL;
    }
    self->finished = 1;
}

static void reader_dealloc(Reader *self) {
    if (!self->busy) reader_release(self);
    PyMem_Free(self->kinds);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *source_error(Reader *self, int rc) {
    PyObject *err = PyObject_CallFunction(SourceError, "si", self->db ? api.errmsg(self->db) : "out of memory", rc);
    if (err) {
        PyErr_SetObject(SourceError, err);
        Py_DECREF(err);
    }
    return NULL;
}

/* Reader(path, sql, params, kinds, timeout_ms): the statement prepared and bound on a read-only
   connection of its own; params are str or int. */
static int reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"path", "sql", "params", "kinds", "timeout_ms", NULL};
    const char *path, *sql, *kinds;
    Py_ssize_t sql_len, nkinds;
    PyObject *params;
    int timeout_ms;
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "_sqlite_columns.bind() was not called");
        return -1;
    }
    if (self->db || self->kinds) {
        PyErr_SetString(PyExc_RuntimeError, "a Reader is initialized once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ss#O!s#i", keywords, &path, &sql, &sql_len, &PyTuple_Type,
                                     &params, &kinds, &nkinds, &timeout_ms))
        return -1;
    /* NOMUTEX: one thread at a time uses a Reader (`busy`), and the connection's mutex on every
       column call cost ~30 % of the read (measured). */
    int rc = api.open_v2(path, &self->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        source_error(self, rc);
        reader_release(self);
        return -1;
    }
    api.busy_timeout(self->db, timeout_ms);
    rc = api.prepare_v2(self->db, sql, (int)sql_len, &self->stmt, NULL);
    if (rc != SQLITE_OK) {
        source_error(self, rc);
        reader_release(self);
        return -1;
    }
    self->ncol = api.column_count(self->stmt);
    if (self->ncol != nkinds) {
        PyErr_Format(PyExc_ValueError, "the statement has %d columns, kinds names %zd", self->ncol, nkinds);
        reader_release(self);
        return -1;
    }
    for (Py_ssize_t c = 0; c < nkinds; c++) {
        if (kinds[c] != 's' && kinds[c] != 'i') {
            PyErr_SetString(PyExc_ValueError, "kinds are 's' (text) or 'i' (integer)");
            reader_release(self);
            return -1;
        }
    }
    self->kinds = PyMem_Malloc(nkinds + 1);
    if (!self->kinds) {
        reader_release(self);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(self->kinds, kinds, nkinds);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(params); i++) {
        PyObject *v = PyTuple_GET_ITEM(params, i);
        if (PyUnicode_Check(v)) {
            Py_ssize_t n;
            const char *text = PyUnicode_AsUTF8AndSize(v, &n);
            if (!text) {
                reader_release(self);
                return -1;
            }
            rc = api.bind_text(self->stmt, (int)i + 1, text, (int)n, SQLITE_TRANSIENT);
        } else if (PyLong_Check(v)) {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred()) {
                reader_release(self);
                return -1;
            }
            rc = api.bind_int64(self->stmt, (int)i + 1, (int64_t)x);
        } else {
            PyErr_SetString(PyExc_TypeError, "parameters are str or int");
            reader_release(self);
            return -1;
        }
        if (rc != SQLITE_OK) {
            source_error(self, rc);
            reader_release(self);
            return -1;
        }
    }
    return 0;
}

/* One column's growing buffers. */
typedef struct {
    unsigned char *validity;
    int32_t *offsets; /* text */
    unsigned char *data; /* text bytes, or int64 values */
    size_t used, size; /* of data, in bytes */
    int nulls;
} Column;

static int grow(Column *col, size_t need) {
    if (col->used + need <= col->size) return 1;
    size_t size = col->size ? col->size : 65536;
    while (size < col->used + need) size *= 2;
    unsigned char *data = PyMem_RawRealloc(col->data, size);
    if (!data) return 0;
    col->data = data;
    col->size = size;
    return 1;
}

enum { MORE = 0, DONE = 1, NOT_PLAIN = 2, FAILED = 3, NO_MEMORY = 4 };

/* fetch(max_rows, max_bytes) -> (rows, columns, state): at most max_rows rows, fewer once the text
   read passes max_bytes; columns[c] is (validity or None, offsets, data) for text and (validity or
   None, data) for integers, as bytes in Arrow's layout; state is "more", "done" or "not plain". */
static PyObject *reader_fetch(Reader *self, PyObject *args) {
    Py_ssize_t max_rows, max_bytes;
    if (!PyArg_ParseTuple(args, "nn", &max_rows, &max_bytes)) return NULL;
    if (max_rows < 1 || max_rows > (1 << 24) || max_bytes < 1 || max_bytes > (1 << 30)) {
        PyErr_SetString(PyExc_ValueError, "max_rows is 1..2**24 and max_bytes 1..2**30");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "a Reader is read by one thread at a time");
        return NULL;
    }
    if (!self->stmt || self->finished) return Py_BuildValue("(n[]s)", (Py_ssize_t)0, "done");
    int ncol = self->ncol;
    Column *cols = PyMem_RawCalloc(ncol, sizeof(Column));
    /* The row's storage classes (read before any conversion), and its texts as SQLite holds them. */
    int *types = PyMem_RawCalloc(ncol, sizeof(int));
    const unsigned char **texts = PyMem_RawCalloc(ncol, sizeof(char *));
    int *lengths = PyMem_RawCalloc(ncol, sizeof(int));
    if (!cols || !types || !texts || !lengths) {
        PyMem_RawFree(cols);
        PyMem_RawFree(types);
        PyMem_RawFree(texts);
        PyMem_RawFree(lengths);
        return PyErr_NoMemory();
    }
    size_t bitmap = (size_t)(max_rows + 7) / 8;
    int state = MORE, rc = SQLITE_OK;
    for (int c = 0; c < ncol; c++) {
        cols[c].validity = PyMem_RawCalloc(bitmap, 1);
        if (self->kinds[c] == 's') cols[c].offsets = PyMem_RawCalloc((size_t)max_rows + 1, sizeof(int32_t));
        else cols[c].data = PyMem_RawMalloc((size_t)max_rows * 8), cols[c].size = (size_t)max_rows * 8;
        if (!cols[c].validity || (self->kinds[c] == 's' ? !cols[c].offsets : !cols[c].data)) state = NO_MEMORY;
    }
    Py_ssize_t n = 0;
    size_t text_bytes = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (state == MORE && n < max_rows && text_bytes < (size_t)max_bytes) {
        rc = api.step(self->stmt);
        if (rc == SQLITE_DONE) {
            state = DONE;
            break;
        }
        if (rc != SQLITE_ROW) {
            state = FAILED;
            break;
        }
        /* The whole row is checked before any of it is kept: a batch ends before a row it refuses. */
        for (int c = 0; c < ncol && state == MORE; c++) {
            int type = types[c] = api.column_type(self->stmt, c);
            if (type == SQLITE_NULL) continue;
            if (self->kinds[c] == 's') {
                if (type != SQLITE_TEXT) {
                    state = NOT_PLAIN;
                    break;
                }
                const unsigned char *text = texts[c] = api.column_text(self->stmt, c);
                int len = lengths[c] = api.column_bytes(self->stmt, c);
                if (!text) {
                    state = NO_MEMORY; /* a TEXT value always has a pointer, unless SQLite ran out of memory */
                    break;
                }
                if (!valid_utf8(text, len)) state = NOT_PLAIN;
            } else if (type != SQLITE_INTEGER) {
                state = NOT_PLAIN;
            }
        }
        if (state != MORE) break;
        for (int c = 0; c < ncol; c++) {
            Column *col = &cols[c];
            int null = types[c] == SQLITE_NULL;
            if (null) col->nulls++;
            else col->validity[n >> 3] |= (unsigned char)(1u << (n & 7));
            if (self->kinds[c] == 's') {
                if (!null) {
                    /* The pointer of the check above: valid until the next step. */
                    const unsigned char *text = texts[c];
                    size_t len = (size_t)lengths[c];
                    if (!grow(col, len)) {
                        state = NO_MEMORY;
                        break;
                    }
                    if (len) memcpy(col->data + col->used, text, len);
                    col->used += len;
                    text_bytes += len;
                }
                col->offsets[n + 1] = (int32_t)col->used;
            } else {
                int64_t v = null ? 0 : api.column_int64(self->stmt, c);
                memcpy(col->data + (size_t)n * 8, &v, 8);
            }
        }
        if (state == MORE) n++;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *result = NULL;
    if (state == FAILED) {
        source_error(self, rc);
        reader_release(self);
    } else if (state == NO_MEMORY) {
        PyErr_NoMemory();
        reader_release(self);
    } else {
        if (state != MORE) self->finished = 1;
        if (state == DONE || state == NOT_PLAIN) {
            /* Nothing more will be read: the read transaction ends now, not when the object is freed. */
            reader_release(self);
        }
        PyObject *columns = PyList_New(ncol);
        for (int c = 0; columns && c < ncol; c++) {
            Column *col = &cols[c];
            PyObject *validity = col->nulls ? PyBytes_FromStringAndSize((char *)col->validity, (Py_ssize_t)(n + 7) / 8)
                                            : (Py_INCREF(Py_None), Py_None);
            PyObject *item = NULL;
            if (validity) {
                if (self->kinds[c] == 's') {
                    PyObject *offsets = PyBytes_FromStringAndSize((char *)col->offsets, (n + 1) * 4);
                    PyObject *data = PyBytes_FromStringAndSize((char *)col->data, (Py_ssize_t)col->used);
                    if (offsets && data) item = PyTuple_Pack(3, validity, offsets, data);
                    Py_XDECREF(offsets);
                    Py_XDECREF(data);
                } else {
                    PyObject *data = PyBytes_FromStringAndSize((char *)col->data, n * 8);
                    if (data) item = PyTuple_Pack(2, validity, data);
                    Py_XDECREF(data);
                }
                Py_DECREF(validity);
            }
            if (!item) {
                Py_CLEAR(columns);
                break;
            }
            PyList_SET_ITEM(columns, c, item);
        }
        if (columns) {
            const char *word = state == MORE ? "more" : state == DONE ? "done" : "not plain";
            result = Py_BuildValue("(nNs)", n, columns, word);
        }
    }
    for (int c = 0; c < ncol; c++) {
        PyMem_RawFree(cols[c].validity);
        PyMem_RawFree(cols[c].offsets);
        PyMem_RawFree(cols[c].data);
    }
    PyMem_RawFree(cols);
    PyMem_RawFree(types);
    PyMem_RawFree(texts);
    PyMem_RawFree(lengths);
    return result;
}

static PyObject *reader_close(Reader *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "a Reader is read by one thread at a time");
        return NULL;
    }
    reader_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef reader_methods[] = {
    {"fetch", (PyCFunction)reader_fetch, METH_VARARGS, "fetch(max_rows, max_bytes) -> (rows, columns, state)"},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "End the read: finalize the statement, close the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seqexport_dagster.source._sqlite_columns.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_doc = "Reader(path, sql, params, kinds, timeout_ms): one statement's rows as column buffers.",
};

/* bind(addresses): the SQLite functions to call, as integers, in the order of `FUNCTIONS`. */
static PyObject *module_bind(PyObject *Py_UNUSED(module), PyObject *addresses) {
    if (!PyTuple_Check(addresses) || PyTuple_GET_SIZE(addresses) != N_FUNCTIONS) {
        PyErr_Format(PyExc_ValueError, "bind takes a tuple of %zd addresses", N_FUNCTIONS);
        return NULL;
    }
    void *found[32];
    for (Py_ssize_t i = 0; i < N_FUNCTIONS; i++) {
        found[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, i));
        if (!found[i]) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "no address for %s", NAMES[i]);
            return NULL;
        }
    }
    memcpy(&api, found, sizeof(api));
    bound = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", module_bind, METH_O, "bind(addresses): the SQLite functions to call (see FUNCTIONS)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_sqlite_columns",
    .m_doc = "A SQLite read into Arrow column buffers (sqlite_read.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sqlite_columns(void) {
    if (sizeof(api) != sizeof(void *) * (size_t)N_FUNCTIONS) return PyErr_Format(PyExc_SystemError, "api table");
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    SourceError = PyErr_NewException("seqexport_dagster.source._sqlite_columns.SourceError", NULL, NULL);
    PyObject *functions = PyTuple_New(N_FUNCTIONS);
    for (Py_ssize_t i = 0; functions && i < N_FUNCTIONS; i++)
        PyTuple_SET_ITEM(functions, i, PyUnicode_FromString(NAMES[i]));
    if (!SourceError || !functions || PyModule_AddObjectRef(m, "SourceError", SourceError) < 0 ||
        PyModule_AddObject(m, "FUNCTIONS", functions) < 0 ||
        PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_XDECREF(functions);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

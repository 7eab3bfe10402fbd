/*
 * tidemark.storage._fastwalk: list one local folder with its files' sizes, in C.
 *
 * `checkpoint inspect` walks trees of a million small state files. In Python, os.scandir plus
 * DirEntry.stat spends most of its time building objects per entry; here readdir and fstatat run
 * with the GIL released into a plain buffer, and Python objects are made once per entry at the end.
 * Semantics match storage.local.LocalFS.list_dir's pure-Python path: symlinks are not followed (a link is a
 * file with its own lstat size), a file removed while we list is skipped, a missing folder is None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    long long size;
    size_t name_at;
    size_t name_len;
    int is_dir;
} entry_t;

typedef struct {
    entry_t *entries;
    size_t count, cap;
    char *names;
    size_t used, names_cap;
} listing_t;

static void listing_free(listing_t *l) {
    free(l->entries);
    free(l->names);
}

/* 0 on success, ENOMEM when out of memory. */
static int listing_add(listing_t *l, const char *name, int is_dir, long long size) {
    size_t len = strlen(name);
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        entry_t *grown = realloc(l->entries, cap * sizeof(entry_t));
        if (grown == NULL) return ENOMEM;
        l->entries = grown;
        l->cap = cap;
    }
    if (l->used + len > l->names_cap) {
        size_t cap = l->names_cap ? l->names_cap * 2 : 8192;
        while (cap < l->used + len) cap *= 2;
        char *grown = realloc(l->names, cap);
        if (grown == NULL) return ENOMEM;
        l->names = grown;
        l->names_cap = cap;
    }
    memcpy(l->names + l->used, name, len);
    l->entries[l->count].size = size;
    l->entries[l->count].name_at = l->used;
    l->entries[l->count].name_len = len;
    l->entries[l->count].is_dir = is_dir;
    l->count++;
    l->used += len;
    return 0;
}

/* Fill l from the folder at path; 0 or an errno. Runs without the GIL. */
static int read_folder(const char *path, listing_t *l) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        close(fd);
        return err;
    }
    int err = 0;
    int at = dirfd(dir); /* the DIR owns fd now */
    struct dirent *de;
    struct stat st;
    for (;;) {
        errno = 0;
        de = readdir(dir);
        if (de == NULL) {
            err = errno;
            break;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        int is_dir = 0;
        long long size = 0;
        if (de->d_type == DT_DIR) {
            is_dir = 1;
        } else {
            if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
                if (errno == ENOENT) continue; /* removed while we listed */
                err = errno;
                break;
            }
            is_dir = S_ISDIR(st.st_mode);
            size = (long long)st.st_size;
        }
        err = listing_add(l, name, is_dir, size);
        if (err) break;
    }
    closedir(dir); /* closes fd */
    return err;
}

static PyObject *list_dir(PyObject *module, PyObject *arg) {
    (void)module;
    PyObject *encoded = NULL;
    if (!PyUnicode_FSConverter(arg, &encoded)) return NULL;
    const char *path = PyBytes_AS_STRING(encoded);
    listing_t l = {0};
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = read_folder(path, &l);
    Py_END_ALLOW_THREADS
    if (err == ENOENT || err == ENOTDIR) {
        listing_free(&l);
        Py_DECREF(encoded);
        Py_RETURN_NONE;
    }
    if (err) {
        listing_free(&l);
        Py_DECREF(encoded);
        if (err == ENOMEM) return PyErr_NoMemory();
        errno = err; /* OSError picks the subclass from errno: PermissionError for EACCES */
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
    }
    Py_DECREF(encoded);

    PyObject *files = PyList_New(0);
    PyObject *dirs = PyList_New(0);
    if (files == NULL || dirs == NULL) goto fail;
    for (size_t i = 0; i < l.count; i++) {
        entry_t *e = &l.entries[i];
        PyObject *name = PyUnicode_DecodeFSDefaultAndSize(l.names + e->name_at, (Py_ssize_t)e->name_len);
        if (name == NULL) goto fail;
        int rc;
        if (e->is_dir) {
            rc = PyList_Append(dirs, name);
        } else {
            PyObject *size = PyLong_FromLongLong(e->size);
            PyObject *pair = size == NULL ? NULL : PyTuple_Pack(2, name, size);
            Py_XDECREF(size);
            rc = pair == NULL ? -1 : PyList_Append(files, pair);
            Py_XDECREF(pair);
        }
        Py_DECREF(name);
        if (rc != 0) goto fail;
    }
    listing_free(&l);
    PyObject *result = PyTuple_Pack(2, files, dirs);
    Py_DECREF(files);
    Py_DECREF(dirs);
    return result;

fail:
    listing_free(&l);
    Py_XDECREF(files);
    Py_XDECREF(dirs);
    return NULL;
}

static PyMethodDef methods[] = {
    {"list_dir", list_dir, METH_O,
     "list_dir(path) -> (files, dirs) | None\n\n"
     "One folder: files as (name, size) pairs (symlinks not followed), sub-folder names; "
     "None when the folder does not exist."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastwalk",
    .m_doc = "Native listing of local folders for checkpoint walks.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastwalk(void) { return PyModule_Create(&module_def); }

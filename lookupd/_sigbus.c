/*
 * SIGBUS guard for read-only index maps.
 *
 * Reading a mapped page that lies past the end of its file raises SIGBUS, which kills a
 * Python process. The broker shrinks index files (it trims the active index when it rolls),
 * so a reader that checked the size a moment before can still lose that race.
 *
 * This module installs a SIGBUS handler that, for an address inside a registered index
 * map, maps an anonymous zero page over the faulting page and returns: the interrupted read
 * completes (it sees zeros) and a global fault counter goes up. Python code reads the
 * counter before and after each search and, if it moved, discards the answer and remaps
 * the file. Faults anywhere else are passed to the previous handler (or the default
 * action), so behaviour outside index maps is unchanged.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_RANGES 65536

static _Atomic uintptr_t range_start[MAX_RANGES];
static _Atomic uintptr_t range_end[MAX_RANGES];
static _Atomic size_t range_high;      /* slots [0, range_high) may be in use */
static _Atomic unsigned long fault_count;
static struct sigaction previous;
static int installed;
static uintptr_t page_mask;

static int
is_ours(uintptr_t addr)
{
    size_t n = atomic_load(&range_high);
    for (size_t i = 0; i < n; i++) {
        uintptr_t s = atomic_load(&range_start[i]);
        if (s != 0 && addr >= s && addr < atomic_load(&range_end[i]))
            return 1;
    }
    return 0;
}

static void
on_sigbus(int sig, siginfo_t *info, void *context)
{
    uintptr_t addr = (uintptr_t)info->si_addr;
    if (info->si_code == BUS_ADRERR && is_ours(addr)) {
        void *page = (void *)(addr & page_mask);
        if (mmap(page, ~page_mask + 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            atomic_fetch_add(&fault_count, 1);
            return;
        }
    }
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* Default action: returning re-executes the access, which now kills the process. */
    signal(sig, SIG_DFL);
}

static PyObject *
guard_install(PyObject *self, PyObject *unused)
{
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
        if (sigaction(SIGBUS, &sa, &previous) != 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        installed = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *
guard_register(PyObject *self, PyObject *args)
{
    unsigned long long start, length;
    if (!PyArg_ParseTuple(args, "KK", &start, &length))
        return NULL;
    size_t high = atomic_load(&range_high);
    for (size_t i = 0; i < MAX_RANGES; i++) {
        if (i < high && atomic_load(&range_start[i]) != 0)
            continue;
        atomic_store(&range_end[i], (uintptr_t)(start + length));
        atomic_store(&range_start[i], (uintptr_t)start);
        if (i >= high)
            atomic_store(&range_high, i + 1);
        return PyLong_FromSize_t(i);
    }
    return PyLong_FromLong(-1); /* full: the map stays unguarded, callers fall back to size checks */
}

static PyObject *
guard_unregister(PyObject *self, PyObject *arg)
{
    Py_ssize_t slot = PyLong_AsSsize_t(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot >= 0 && slot < MAX_RANGES)
        atomic_store(&range_start[slot], 0);
    Py_RETURN_NONE;
}

static PyObject *
guard_faults(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLong(atomic_load(&fault_count));
}

static PyMethodDef methods[] = {
    {"install", guard_install, METH_NOARGS, "Install the SIGBUS handler (idempotent)."},
    {"register", guard_register, METH_VARARGS, "register(address, length) -> slot: guard a read-only map."},
    {"unregister", guard_unregister, METH_O, "unregister(slot): stop guarding (call before unmapping)."},
    {"faults", guard_faults, METH_NOARGS, "Number of faults absorbed so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sigbus", "SIGBUS guard for read-only index maps.", -1, methods,
};

PyMODINIT_FUNC
PyInit__sigbus(void)
{
    return PyModule_Create(&module);
}

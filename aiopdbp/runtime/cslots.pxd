# A pure class's __slots__ attribute read and written in place, in C: the
# compiled send and receive paths (runtime/csendpath.pyx, crecvpath.pyx) take
# a slot's offset from its member descriptor once and then touch the object's
# memory directly, for objects of exactly that class (the caller checks).
from cpython.ref cimport PyObject

cdef extern from *:
    """
    #include <structmember.h>
    /* where a class keeps a __slots__ attribute in its objects (-1: not a
       plain, writable object slot of it) */
    static inline Py_ssize_t aiopdbp_slot_offset(PyObject *cls, PyObject *name) {
        PyObject *d = PyObject_GetAttr(cls, name);
        Py_ssize_t off = -1;
        if (d == NULL) { PyErr_Clear(); return -1; }
        if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) off = m->offset;
        }
        Py_DECREF(d);
        return off;
    }
    static inline PyObject *aiopdbp_slot_get(PyObject *o, Py_ssize_t off) {
        return *(PyObject **)((char *)o + off);   /* borrowed; NULL: not set */
    }
    static inline void aiopdbp_slot_set(PyObject *o, Py_ssize_t off, PyObject *v) {
        PyObject **p = (PyObject **)((char *)o + off);
        PyObject *old = *p;
        Py_INCREF(v);
        *p = v;
        Py_XDECREF(old);
    }
    /* the object's slot at off plus one, in place; 0 where it is not a
       plain int (not set, or set to something else: the caller's += then) */
    static inline int aiopdbp_slot_incr(PyObject *o, Py_ssize_t off) {
        PyObject **p = (PyObject **)((char *)o + off);
        PyObject *old = *p, *v;
        Py_ssize_t n;
        if (old == NULL || !PyLong_CheckExact(old)) return 0;
        n = PyLong_AsSsize_t(old);
        if (n == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        if (n == PY_SSIZE_T_MAX) return 0;
        v = PyLong_FromSsize_t(n + 1);
        if (v == NULL) { PyErr_Clear(); return 0; }
        *p = v;
        Py_DECREF(old);
        return 1;
    }
    """
    Py_ssize_t aiopdbp_slot_offset(object cls, object name) except? -2
    PyObject *aiopdbp_slot_get(object o, Py_ssize_t off)
    void aiopdbp_slot_set(object o, Py_ssize_t off, object v)
    int aiopdbp_slot_incr(object o, Py_ssize_t off)

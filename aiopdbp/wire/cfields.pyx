# cython: language_level=3
"""The compiled twin of :mod:`aiopdbp.wire.fields` (read its docstring): the
same :func:`field`, a getter in C (a getset descriptor) that reads item
``i`` of the tuple in place, where the pure form's property calls an item
getter (``tests/test_message.py`` runs both)."""

from aiopdbp.wire.fields import DOCS, NAMES

cdef extern from *:
    """
    #ifndef AIOPDBP_SOURCE_HASH
    #define AIOPDBP_SOURCE_HASH ""
    #endif
    """
    const char *AIOPDBP_SOURCE_HASH

#: the files this twin was built from, and their hash then (aiopdbp.ext checks it)
__sources__ = ("fields.py", "cfields.pyx")
__source_hash__ = AIOPDBP_SOURCE_HASH.decode("ascii")

__all__ = ["DOCS", "NAMES", "field"]

cdef extern from *:
    """
    /* item i of a tuple (the getter's closure is i), or IndexError as
       tuple's own subscript says it: a short tuple has no such field */
    static PyObject *aiopdbp_field_get(PyObject *o, void *closure) {
        Py_ssize_t i = (Py_ssize_t)closure;
        PyObject *v;
        if (i >= PyTuple_GET_SIZE(o)) {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return NULL;
        }
        v = PyTuple_GET_ITEM(o, i);
        Py_INCREF(v);
        return v;
    }
    /* one definition per field, alive as long as the process (a getset
       descriptor points at its definition) */
    static PyGetSetDef aiopdbp_fields[5] = {
        {"source", aiopdbp_field_get, NULL, "the sender's name", (void *)0},
        {"kind", aiopdbp_field_get, NULL, "SHORT, or COMMAND", (void *)1},
        {"com", aiopdbp_field_get, NULL, "the sender's com=", (void *)2},
        {"data", aiopdbp_field_get, NULL, "the payload", (void *)3},
        {"source_pid", aiopdbp_field_get, NULL, "the number the job gave the sender's name", (void *)4},
    };
    /* the descriptor for field i, on tuple: it reads any tuple (the type
       check the descriptor makes before the getter is a tuple's) */
    static PyObject *aiopdbp_field(Py_ssize_t i) {
        return PyDescr_NewGetSet(&PyTuple_Type, &aiopdbp_fields[i]);
    }
    """
    object aiopdbp_field(Py_ssize_t i)

# (the C table above and the pure form's: one list)
assert tuple((<object>aiopdbp_field(i)).__name__ for i in range(5)) == NAMES
assert tuple((<object>aiopdbp_field(i)).__doc__ for i in range(5)) == DOCS


def field(i):
    """See :func:`aiopdbp.wire.fields.field`."""
    if not 0 <= i < len(NAMES):
        raise ValueError(f"no field {i}")
    return aiopdbp_field(i)

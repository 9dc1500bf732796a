# cython: language_level=3
cdef extern from *:
    """
    #include <valgrind/callgrind.h>
    static void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
    static void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
    """
    void cg_start()
    void cg_stop()
def start():
    cg_start()
def stop():
    cg_stop()

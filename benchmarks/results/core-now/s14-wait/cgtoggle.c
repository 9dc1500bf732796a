/* callgrind's collection switched from Python (ctypes): halves_ir.py counts one half only */
#include <valgrind/callgrind.h>
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }

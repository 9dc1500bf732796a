/* callgrind client request from Python (ctypes): dump the counts since the last dump under a label */
#include <valgrind/callgrind.h>
void mark(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }

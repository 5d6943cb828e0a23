// The public C entry points of libshockwave.so (declared in shockwave.h).
//
// Each one refuses to run in a process forked after the library loaded,
// before it enters Go: the Go runtime's threads do not survive fork(), and
// a child that calls into it can block forever. Otherwise it forwards to
// the Go export of the same name with the swgo_ prefix (exports.go).

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "shockwave.h"
#include "_cgo_export.h"

static pid_t sw_pid;           // the process that loaded the library
static volatile int sw_forked; // set in every child by the atfork handler

static void sw_child(void) { sw_forked = 1; }

__attribute__((constructor)) static void sw_init(void) {
    sw_pid = getpid();
    pthread_atfork(NULL, NULL, sw_child);
}

// sw_in_child reports whether this process is a fork of the one that
// loaded the library. The flag covers fork(); the pid covers a raw clone.
static int sw_in_child(void) { return sw_forked || getpid() != sw_pid; }

static const char sw_fork_msg[] =
    "shockwave: this process was forked after libshockwave.so loaded; the Go runtime does not "
    "survive fork(), so a child must not call the library (use jobs only in the process that "
    "opened them; start new jobs in a spawned process)";

#define SW_GUARD()                            \
    do {                                      \
        if (sw_in_child()) {                  \
            return SHOCKWAVE_ERR_FORKED;      \
        }                                     \
    } while (0)

int shockwave_abi_version(void) { return SHOCKWAVE_ABI_VERSION; }

int shockwave_open(const char *config_json, int64_t *handle) {
    if (handle != NULL) {
        *handle = 0;
    }
    SW_GUARD();
    return swgo_open((char *)config_json, handle);
}

int shockwave_control_block(int64_t handle, shockwave_control **block) {
    SW_GUARD();
    return swgo_control_block(handle, (void **)block);
}

int shockwave_boundary(int64_t handle) {
    SW_GUARD();
    return swgo_boundary(handle);
}

int shockwave_wait_run(int64_t handle, int64_t timeout_ms) {
    SW_GUARD();
    return swgo_wait_run(handle, timeout_ms);
}

int shockwave_epoch(int64_t handle) {
    SW_GUARD();
    return swgo_epoch(handle);
}

int shockwave_set_batch_size(int64_t handle, int64_t batch_size) {
    SW_GUARD();
    return swgo_set_batch_size(handle, batch_size);
}

int shockwave_lease(int64_t handle, char *buf, size_t cap, size_t *len) {
    SW_GUARD();
    return swgo_text(handle, 0, buf, cap, len);
}

int shockwave_grant(int64_t handle, char *buf, size_t cap, size_t *len) {
    SW_GUARD();
    return swgo_text(handle, 2, buf, cap, len);
}

int shockwave_state(int64_t handle, char *buf, size_t cap, size_t *len) {
    SW_GUARD();
    return swgo_text(handle, 1, buf, cap, len);
}

int shockwave_finish(int64_t handle) {
    SW_GUARD();
    return swgo_finish(handle);
}

int shockwave_close(int64_t handle) {
    SW_GUARD();
    return swgo_close(handle);
}

int shockwave_last_error(int64_t handle, char *buf, size_t cap, size_t *len) {
    if (len == NULL) {
        return SHOCKWAVE_ERR_INVALID;
    }
    if (!sw_in_child()) {
        return swgo_last_error(handle, buf, cap, len);
    }
    size_t n = sizeof sw_fork_msg - 1;
    *len = n;
    if (buf != NULL && cap > 0) {
        size_t k = n < cap - 1 ? n : cap - 1;
        memcpy(buf, sw_fork_msg, k);
        buf[k] = '\0';
    }
    return SHOCKWAVE_OK;
}

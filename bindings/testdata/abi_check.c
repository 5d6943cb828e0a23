// Compiled against shockwave.h and linked with libshockwave.so by
// bindings/python/tests/test_c_header.py: checks that the header matches
// the library and prints the control block's layout for the ctypes mirror.
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shockwave.h"

static int fails;

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) {                    \
            printf("FAIL: " __VA_ARGS__); \
            printf("\n");                 \
            fails++;                      \
        }                                 \
    } while (0)

int main(void) {
    char buf[512];
    size_t len = 0;
    int64_t h = 42;

    CHECK(shockwave_abi_version() == SHOCKWAVE_ABI_VERSION, "abi version %d", shockwave_abi_version());

    int st = shockwave_open("{\"model\": \"m\", \"no_such_key\": 1}", &h);
    CHECK(st == SHOCKWAVE_ERR_INVALID, "open with an unknown key: status %d", st);
    CHECK(h == 0, "handle after a failed open: %lld", (long long)h);
    shockwave_last_error(0, buf, sizeof buf, &len);
    CHECK(strstr(buf, "no_such_key") != NULL, "open error: %s", buf);

    st = shockwave_open(NULL, &h);
    CHECK(st == SHOCKWAVE_ERR_INVALID, "open(NULL): status %d", st);

    st = shockwave_boundary(12345);
    CHECK(st == SHOCKWAVE_ERR_HANDLE, "unknown handle: status %d", st);
    shockwave_last_error(12345, buf, sizeof buf, &len);
    CHECK(strstr(buf, "12345") != NULL, "unknown handle error: %s", buf);

    // Truncation follows snprintf: the full length, a NUL-terminated prefix.
    char small[8];
    shockwave_last_error(12345, small, sizeof small, &len);
    CHECK(len > sizeof small && strlen(small) == sizeof small - 1, "truncation: len %zu, %s", len, small);
    CHECK(shockwave_last_error(1, buf, sizeof buf, NULL) == SHOCKWAVE_ERR_INVALID, "len NULL");

    // A forked child gets SHOCKWAVE_ERR_FORKED at once.
    pid_t pid = fork();
    if (pid == 0) {
        int c = shockwave_boundary(1);
        shockwave_last_error(1, buf, sizeof buf, &len);
        _exit(c == SHOCKWAVE_ERR_FORKED && strstr(buf, "forked") != NULL ? 0 : 1);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "forked child: status %d", wst);

    printf("sizeof %zu\n", sizeof(shockwave_control));
    printf("magic %zu\nversion %zu\nlease %zu\nbatch_size %zu\nlease_seq %zu\nsteps %zu\nactive %zu\n",
           offsetof(shockwave_control, magic), offsetof(shockwave_control, version),
           offsetof(shockwave_control, lease), offsetof(shockwave_control, batch_size),
           offsetof(shockwave_control, lease_seq), offsetof(shockwave_control, steps),
           offsetof(shockwave_control, active));
    printf("gate %zu\nrank %zu\nworld %zu\n", offsetof(shockwave_control, gate),
           offsetof(shockwave_control, rank), offsetof(shockwave_control, world));
    printf("%s\n", fails ? "FAILED" : "PASS");
    return fails != 0;
}

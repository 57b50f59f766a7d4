/* check.h: the few helpers the C tests share. Each test is one program: it exits 0 when every
 * check held, and 1 (after saying which check failed and leasehold_last_error()) otherwise. */
#ifndef LEASEHOLD_TEST_CHECK_H
#define LEASEHOLD_TEST_CHECK_H

#include "leasehold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline const char *status_name(leasehold_status s) {
    switch (s) {
    case LEASEHOLD_OK: return "LEASEHOLD_OK";
    case LEASEHOLD_NOT_ACQUIRED: return "LEASEHOLD_NOT_ACQUIRED";
    case LEASEHOLD_LOST: return "LEASEHOLD_LOST";
    case LEASEHOLD_UNAVAILABLE: return "LEASEHOLD_UNAVAILABLE";
    case LEASEHOLD_INVALID_ARGUMENT: return "LEASEHOLD_INVALID_ARGUMENT";
    case LEASEHOLD_INTERNAL: return "LEASEHOLD_INTERNAL";
    case LEASEHOLD_INTERRUPTED: return "LEASEHOLD_INTERRUPTED";
    case LEASEHOLD_STALE_FENCE: return "LEASEHOLD_STALE_FENCE";
    case LEASEHOLD_INCOMPLETE_ATTEMPT: return "LEASEHOLD_INCOMPLETE_ATTEMPT";
    }
    return "(unknown status)";
}

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: check failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, \
                    #cond, leasehold_last_error());                                              \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Runs `call` and fails unless it returns `expected`. */
#define EXPECT(expected, call)                                                                   \
    do {                                                                                         \
        leasehold_status got_ = (call);                                                          \
        if (got_ != (expected)) {                                                                \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: \"%s\")\n", __FILE__, \
                    __LINE__, #call, status_name(got_), status_name(expected),                   \
                    leasehold_last_error());                                                     \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* The last error contains `needle`. */
#define EXPECT_ERROR_MENTIONS(needle)                                                            \
    do {                                                                                         \
        if (strstr(leasehold_last_error(), (needle)) == NULL) {                                  \
            fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__,      \
                    __LINE__, leasehold_last_error(), (needle));                                 \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static inline const char *env_or_die(const char *name) {
    const char *value = getenv(name);
    if (value == NULL || value[0] == '\0') {
        fprintf(stderr, "environment variable %s is not set; run the C tests through "
                        "cargo test -p leasehold-ffi --test c_abi\n", name);
        exit(1);
    }
    return value;
}

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* A key unique to this process and call, so runs sharing a backend never meet by accident. */
static inline void unique_key(char *out, size_t size, const char *label) {
    static unsigned counter = 0;
    snprintf(out, size, "c-test:%s:%ld:%.0f:%u", label, (long)getpid(), now_seconds() * 1e6,
             counter++);
}

#endif

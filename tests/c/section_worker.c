/* One contender of the cross-language test (crates/leasehold-ffi/tests/languages.rs), the C twin of
 * bindings/php/tests/fixtures/mutex-worker.php and with its arguments: waits for the start file, then
 * CYCLES times takes KEY, increments the counter file with a deliberately racy read-modify-write, and
 * releases. Each critical section is logged as "enter_ns exit_ns fence" by CLOCK_MONOTONIC, the
 * clock PHP's hrtime and the Rust workers read too, so sections of all languages compare.
 *
 * usage: section_worker URL KEY COUNTER_FILE LOG_FILE START_FILE CYCLES */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <inttypes.h>
#include <stdint.h>

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The counter's value; an empty file is 0, as PHP's (int) "" is. */
static long read_counter(const char *path) {
    FILE *file = fopen(path, "r");
    CHECK(file != NULL);
    long value = 0;
    if (fscanf(file, "%ld", &value) != 1) {
        value = 0;
    }
    fclose(file);
    return value;
}

static void write_counter(const char *path, long value) {
    FILE *file = fopen(path, "w");
    CHECK(file != NULL);
    CHECK(fprintf(file, "%ld", value) > 0);
    CHECK(fclose(file) == 0);
}

struct section {
    uint64_t enter, exit, fence;
};

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s URL KEY COUNTER_FILE LOG_FILE START_FILE CYCLES\n", argv[0]);
        return 2;
    }
    const char *url = argv[1], *key = argv[2], *counter = argv[3], *log_path = argv[4];
    const char *start = argv[5];
    long cycles = strtol(argv[6], NULL, 10);
    CHECK(cycles > 0);

    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    /* Logged at the end: writing inside the loop would only lengthen the sections. */
    struct section *sections = calloc((size_t)cycles, sizeof *sections);
    CHECK(sections != NULL);
    while (access(start, F_OK) != 0) {
        sleep_ms(1);
    }
    for (long i = 0; i < cycles; i++) {
        leasehold_lease *lease = NULL;
        EXPECT(LEASEHOLD_OK, leasehold_acquire(client, key, strlen(key), 30000, 60000, &lease));
        sections[i].enter = monotonic_ns();
        write_counter(counter, read_counter(counter) + 1);
        sections[i].fence = leasehold_lease_fence(lease);
        sections[i].exit = monotonic_ns();
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
        leasehold_lease_free(lease);
    }
    FILE *log = fopen(log_path, "w");
    CHECK(log != NULL);
    for (long i = 0; i < cycles; i++) {
        fprintf(log, "%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", sections[i].enter, sections[i].exit,
                sections[i].fence);
    }
    CHECK(fclose(log) == 0);
    free(sections);
    leasehold_client_free(client);
    return 0;
}

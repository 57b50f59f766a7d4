/* The C ABI floor for compare.php: the same uncontended cycle as its PHP rows (try_acquire, release, free on a
 * fresh key each time), printing each cycle's latency in nanoseconds, one per line, so that the script compares
 * distributions measured the same way. compare.php builds it with cc against the library in use:
 *
 *   c_cycle URL CYCLES PREFIX
 */
#define _POSIX_C_SOURCE 200809L
#include "leasehold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cycle(leasehold_client *client, const char *prefix, long i) {
    char key[256];
    int length = snprintf(key, sizeof key, "%s:%ld", prefix, i);
    leasehold_lease *lease = NULL;
    if (length <= 0 || (size_t)length >= sizeof key
        || leasehold_try_acquire(client, key, (size_t)length, 30000, &lease) != LEASEHOLD_OK
        || leasehold_lease_release(lease) != LEASEHOLD_OK) {
        fprintf(stderr, "c_cycle: cycle %ld failed: %s\n", i, leasehold_last_error());
        return 0;
    }
    leasehold_lease_free(lease);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: c_cycle URL CYCLES PREFIX\n");
        return 2;
    }
    long cycles = atol(argv[2]);
    leasehold_client *client = NULL;
    if (cycles <= 0 || leasehold_client_open(argv[1], &client) != LEASEHOLD_OK) {
        fprintf(stderr, "c_cycle: cannot open the client: %s\n", leasehold_last_error());
        return 1;
    }
    char warm[200];
    snprintf(warm, sizeof warm, "%s:warm", argv[3]);
    for (long i = 0; i < 20; i++) { /* warm-up: connections, scripts loaded */
        if (!cycle(client, warm, i)) {
            return 1;
        }
    }
    long long *samples = calloc((size_t)cycles, sizeof *samples);
    if (samples == NULL) {
        return 1;
    }
    for (long i = 0; i < cycles; i++) {
        long long start = now_ns();
        if (!cycle(client, argv[3], i)) {
            return 1;
        }
        samples[i] = now_ns() - start;
    }
    for (long i = 0; i < cycles; i++) {
        printf("%lld\n", samples[i]);
    }
    free(samples);
    leasehold_client_free(client);
    return 0;
}

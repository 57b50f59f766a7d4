/* Prints what one lock cycle costs through the C ABI on the backend LEASEHOLD_URL names:
 * try_acquire + release + free on one uncontended key, and the local accessors. Not a pass/fail test. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    const char *n_text = getenv("LEASEHOLD_BENCH_CYCLES");
    long cycles = n_text != NULL ? atol(n_text) : 2000;
    if (cycles <= 0) {
        cycles = 2000;
    }
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char key[128];
    unique_key(key, sizeof key, "bench");
    leasehold_lease *lease = NULL;

    for (long i = 0; i < cycles / 10 + 1; i++) { /* warm up connections and caches */
        EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &lease));
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
        leasehold_lease_free(lease);
    }
    double start = now_seconds();
    for (long i = 0; i < cycles; i++) {
        EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &lease));
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
        leasehold_lease_free(lease);
    }
    double cycle = (now_seconds() - start) / (double)cycles;

    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &lease));
    const long reads = 1000000;
    uint64_t sum = 0;
    start = now_seconds();
    for (long i = 0; i < reads; i++) {
        sum += leasehold_lease_fence(lease);
    }
    double fence = (now_seconds() - start) / (double)reads;
    start = now_seconds();
    for (long i = 0; i < reads; i++) {
        sum += (uint64_t)leasehold_lease_remaining_ms(lease);
    }
    double remaining = (now_seconds() - start) / (double)reads;
    start = now_seconds();
    for (long i = 0; i < reads; i++) {
        sum += (uint64_t)(leasehold_lease_release(NULL) == LEASEHOLD_INVALID_ARGUMENT);
    }
    double failed = (now_seconds() - start) / (double)reads;
    leasehold_lease_free(lease);
    leasehold_client_free(client);

    printf("%s: try_acquire+release+free %.1f us/cycle (%ld cycles); lease_fence %.0f ns; "
           "lease_remaining_ms %.0f ns; a failing call (NULL lease, sets last_error) %.0f ns "
           "[checksum %llu]\n",
           url, cycle * 1e6, cycles, fence * 1e9, remaining * 1e9, failed * 1e9,
           (unsigned long long)(sum % 10));
    return 0;
}

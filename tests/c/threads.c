/* Two threads share one client and contend for one key: never both inside, fences strictly
 * increase, every round completes. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define ROUNDS 25

static const leasehold_client *shared_client;
static char shared_key[128];
static atomic_int inside;
static uint64_t last_fence; /* only touched while holding the lease */
static long completed;      /* likewise */

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        leasehold_lease *lease = NULL;
        EXPECT(LEASEHOLD_OK, leasehold_acquire(shared_client, shared_key, strlen(shared_key), 30000,
                                               60000, &lease));
        CHECK(atomic_fetch_add(&inside, 1) == 0);
        uint64_t fence = leasehold_lease_fence(lease);
        CHECK(fence > last_fence);
        last_fence = fence;
        completed++;
        CHECK(atomic_fetch_sub(&inside, 1) == 1);
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
        leasehold_lease_free(lease);
    }
    /* This thread's own failures only: a fresh thread has no last error. */
    return NULL;
}

static void *fresh_thread_has_no_error(void *arg) {
    (void)arg;
    CHECK(strcmp(leasehold_last_error(), "") == 0);
    return NULL;
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    shared_client = client;
    unique_key(shared_key, sizeof shared_key, "threads");

    /* A failure on this thread is invisible to another. */
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_release(NULL));
    pthread_t probe;
    CHECK(pthread_create(&probe, NULL, fresh_thread_has_no_error, NULL) == 0);
    CHECK(pthread_join(probe, NULL) == 0);

    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, worker, NULL) == 0);
    CHECK(pthread_create(&b, NULL, worker, NULL) == 0);
    CHECK(pthread_join(a, NULL) == 0);
    CHECK(pthread_join(b, NULL) == 0);
    CHECK(completed == 2 * ROUNDS);
    leasehold_client_free(client);
    printf("threads: ok (%ld rounds, last fence %llu)\n", completed, (unsigned long long)last_fence);
    return 0;
}

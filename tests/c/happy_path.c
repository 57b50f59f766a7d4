/* The whole life of a lease on the backend LEASEHOLD_URL names: acquire, fence, token, remaining,
 * extend, release, contention, expiry, takeover, binary keys, and freeing in either order. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

static leasehold_lease *take(const leasehold_client *client, const char *key, size_t len,
                             uint64_t ttl_ms) {
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, ttl_ms, &lease));
    CHECK(lease != NULL);
    return lease;
}

static void lifecycle(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "lifecycle");
    leasehold_lease *lease = take(client, key, strlen(key), 30000);

    CHECK(leasehold_lease_fence(lease) >= 1);
    const char *token = leasehold_lease_token(lease);
    CHECK(token != NULL && strlen(token) == 32);
    CHECK(strspn(token, "0123456789abcdef") == 32);
    int64_t left = leasehold_lease_remaining_ms(lease);
    CHECK(left > 20000 && left <= 30000);

    /* Held: nobody else gets it, not even by waiting a little. */
    leasehold_lease *other = (leasehold_lease *)&other; /* a sentinel that must stay untouched */
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, strlen(key), 1000, &other));
    CHECK(other == (leasehold_lease *)&other);
    double start = now_seconds();
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_acquire(client, key, strlen(key), 1000, 200, &other));
    CHECK(now_seconds() - start >= 0.15); /* it did wait (a little slack for native waits) */
    CHECK(other == (leasehold_lease *)&other);

    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(lease, 60000));
    CHECK(leasehold_lease_remaining_ms(lease) > 50000);

    uint64_t fence = leasehold_lease_fence(lease);
    char first_token[33];
    memcpy(first_token, token, sizeof first_token);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    CHECK(leasehold_lease_remaining_ms(lease) <= 0);
    CHECK(leasehold_lease_fence(lease) == fence); /* still readable after release */
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_release(lease));
    EXPECT_ERROR_MENTIONS("already released");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_extend(lease, 1000));
    leasehold_lease_free(lease);

    /* Free again: the fence strictly increases. */
    leasehold_lease *again = take(client, key, strlen(key), 30000);
    CHECK(leasehold_lease_fence(again) > fence);
    CHECK(strcmp(leasehold_lease_token(again), first_token) != 0);
    /* Freeing a held lease releases it. */
    leasehold_lease_free(again);
    leasehold_lease *third = take(client, key, strlen(key), 30000);
    leasehold_lease_free(third);
}

static void waiting_for_expiry(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "wait");
    leasehold_lease *first = take(client, key, strlen(key), 300);
    leasehold_lease *second = NULL;
    double start = now_seconds();
    EXPECT(LEASEHOLD_OK, leasehold_acquire(client, key, strlen(key), 30000, 20000, &second));
    CHECK(now_seconds() - start < 15.0);
    CHECK(leasehold_lease_fence(second) > leasehold_lease_fence(first));
    /* The first lease expired and its key went to someone else: both operations are Lost, and the
     * current holder keeps the key. */
    EXPECT(LEASEHOLD_LOST, leasehold_lease_extend(first, 30000));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(first));
    leasehold_lease *probe = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, strlen(key), 1000, &probe));
    leasehold_lease_free(first);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(second));
    leasehold_lease_free(second);
}

static void release_after_expiry(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "expiry");
    leasehold_lease *lease = take(client, key, strlen(key), 50);
    sleep_ms(300);
    CHECK(leasehold_lease_remaining_ms(lease) <= 0);
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(lease));
    leasehold_lease_free(lease);

    lease = take(client, key, strlen(key), 50);
    sleep_ms(300);
    EXPECT(LEASEHOLD_LOST, leasehold_lease_extend(lease, 1000));
    leasehold_lease_free(lease);
}

static void binary_keys(const leasehold_client *client) {
    static const char nul_a[] = {'k', '\0', 'a'};
    static const char nul_b[] = {'k', '\0', 'b'};
    static const char not_utf8[] = {'k', (char)0xff, (char)0xfe, (char)0xc3};
    static const char glob[] = "*?[]{}'\"%_";
    leasehold_lease *a = take(client, nul_a, sizeof nul_a, 30000);
    /* Only the bytes after the NUL differ: a different key, not a truncated one. */
    leasehold_lease *b = take(client, nul_b, sizeof nul_b, 30000);
    leasehold_lease *c = take(client, not_utf8, sizeof not_utf8, 30000);
    leasehold_lease *d = take(client, glob, strlen(glob), 30000);
    /* A glob pattern is just bytes: "*" does not cover "k". */
    leasehold_lease *star = take(client, "*", 1, 30000);
    leasehold_lease *k = take(client, "k", 1, 30000);
    leasehold_lease *none = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, nul_a, sizeof nul_a, 1, &none));
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, glob, strlen(glob), 1, &none));

    char longest[1024];
    memset(longest, 'x', sizeof longest);
    leasehold_lease *l = take(client, longest, sizeof longest, 30000);

    leasehold_lease *all[] = {a, b, c, d, star, k, l};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(all[i]));
        leasehold_lease_free(all[i]);
    }
}

static void free_client_first(const char *url) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char key[128];
    unique_key(key, sizeof key, "order");
    leasehold_lease *lease = take(client, key, strlen(key), 30000);
    leasehold_client_free(client); /* the lease keeps the client alive */
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(lease, 30000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);

    /* And a held lease freed after its client is still released. */
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    lease = take(client, key, strlen(key), 30000);
    leasehold_client_free(client);
    leasehold_lease_free(lease);
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    lease = take(client, key, strlen(key), 30000);
    leasehold_lease_free(lease);
    leasehold_client_free(client);
}

/* The ABI check a program makes at start: this header's version passes, another major or a newer minor
 * than the library's is refused with a message naming both versions. */
/* An action run once per key: the steps, and a second attempt that reads the recorded result. */
static void once(const leasehold_client *client) {
    char key[96];
    unique_key(key, sizeof key, "once");
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_once_lock(client, key, strlen(key), 30000, 5000, &lease));
    leasehold_once_state state = LEASEHOLD_ONCE_DONE;
    uint64_t fence = 0, started = 0;
    const char *result = "unset";
    size_t len = 99;
    EXPECT(LEASEHOLD_OK, leasehold_once_read(lease, &state, &fence, &started, &result, &len));
    CHECK(state == LEASEHOLD_ONCE_NONE && result == NULL && len == 0);
    EXPECT(LEASEHOLD_OK, leasehold_once_started(lease, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_once_read(lease, &state, &fence, &started, NULL, NULL));
    CHECK(state == LEASEHOLD_ONCE_STARTED && fence == leasehold_lease_fence(lease) && started > 0);
    EXPECT(LEASEHOLD_OK, leasehold_once_done(lease, "charged\0ok", 10, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);

    lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_once_lock(client, key, strlen(key), 30000, 5000, &lease));
    EXPECT(LEASEHOLD_OK, leasehold_once_read(lease, &state, &fence, &started, &result, &len));
    CHECK(state == LEASEHOLD_ONCE_DONE && len == 10 && memcmp(result, "charged\0ok", 10) == 0);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_once_done(lease, NULL, 3, 60000));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_once_started(lease, 0));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
    /* A plain lease is not a once-key's. */
    leasehold_lease *plain = take(client, key, strlen(key), 30000);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_once_read(plain, &state, NULL, NULL, NULL, NULL));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(plain));
    leasehold_lease_free(plain);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_once_read(NULL, &state, NULL, NULL, NULL, NULL));
}

/* The fence gate's text, for programs that run it on their own store. */
static void gate_text(void) {
    const char *guard = leasehold_fence_gate_text(LEASEHOLD_GATE_POSTGRES_GUARD);
    CHECK(guard != NULL && strstr(guard, "WHERE g.fence <= EXCLUDED.fence") != NULL);
    CHECK(strstr(leasehold_fence_gate_text(LEASEHOLD_GATE_REDIS_SCRIPT), "HSET") != NULL);
    CHECK(leasehold_fence_gate_text(7) == NULL);
}

static void abi_check(void) {
    CHECK(leasehold_abi_version() == LEASEHOLD_ABI_VERSION);
    EXPECT(LEASEHOLD_OK, leasehold_abi_check(LEASEHOLD_ABI_VERSION));
    EXPECT(LEASEHOLD_OK, leasehold_abi_check(LEASEHOLD_ABI_VERSION - LEASEHOLD_ABI_VERSION % 1000));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_abi_check(LEASEHOLD_ABI_VERSION + 1000));
    EXPECT_ERROR_MENTIONS("another major version");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_abi_check(LEASEHOLD_ABI_VERSION + 1));
    EXPECT_ERROR_MENTIONS("older minor version");
    EXPECT_ERROR_MENTIONS(leasehold_version());
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    CHECK(strcmp(leasehold_last_error(), "") == 0);
    abi_check();
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    CHECK(client != NULL);
    lifecycle(client);
    waiting_for_expiry(client);
    release_after_expiry(client);
    binary_keys(client);
    once(client);
    gate_text();
    leasehold_client_free(client);
    free_client_first(url);
    printf("happy_path: ok (%s)\n", leasehold_version());
    return 0;
}

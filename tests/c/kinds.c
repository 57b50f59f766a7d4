/* The second version of the ABI on the backend LEASEHOLD_URL names: shared (read) locks, counting
 * semaphores, restoring a lease by key and token, and the operator's force-release; with the bad
 * inputs of CONTRACT §7 for each (every one a clear status, no output written, nothing disturbed). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

static void shared_locks(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "shared");
    size_t len = strlen(key);
    leasehold_lease *r1 = NULL, *r2 = NULL, *w = (leasehold_lease *)&w;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire_shared(client, key, len, 30000, &r1));
    EXPECT(LEASEHOLD_OK, leasehold_acquire_shared(client, key, len, 30000, 100, &r2));
    CHECK(leasehold_lease_fence(r2) > leasehold_lease_fence(r1));
    CHECK(strcmp(leasehold_lease_token(r1), leasehold_lease_token(r2)) != 0);
    /* Readers hold it: an exclusive request is refused, and leaves its output alone. */
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, len, 30000, &w));
    CHECK(w == (leasehold_lease *)&w);
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(r1, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(r1));
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, len, 30000, &w));
    uint64_t last = leasehold_lease_fence(r2);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(r2));
    w = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &w));
    CHECK(leasehold_lease_fence(w) > last);
    /* A writer holds it: a shared request is held the other way. */
    leasehold_lease *r3 = (leasehold_lease *)&r3;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire_shared(client, key, len, 30000, &r3));
    CHECK(r3 == (leasehold_lease *)&r3);
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_acquire_shared(client, key, len, 30000, 100, &r3));
    CHECK(r3 == (leasehold_lease *)&r3);
    leasehold_lease_free(r1);
    leasehold_lease_free(r2);
    leasehold_lease_free(w); /* releases it */

    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(NULL, key, len, 1000, &r3));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, NULL, len, 1000, &r3));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, 0, 1000, &r3));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 0, &r3));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 1000, NULL));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_acquire_shared(client, key, len, 1000, UINT64_MAX, &r3));
    CHECK(r3 == (leasehold_lease *)&r3);
}

static void semaphores(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "semaphore");
    size_t len = strlen(key);
    leasehold_lease *p[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        EXPECT(LEASEHOLD_OK, leasehold_try_acquire_permit(client, key, len, 3, 30000, &p[i]));
        if (i > 0) {
            CHECK(leasehold_lease_fence(p[i]) > leasehold_lease_fence(p[i - 1]));
        }
    }
    leasehold_lease *extra = (leasehold_lease *)&extra;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire_permit(client, key, len, 3, 30000, &extra));
    EXPECT(LEASEHOLD_NOT_ACQUIRED,
           leasehold_acquire_permit(client, key, len, 3, 30000, 100, &extra));
    CHECK(extra == (leasehold_lease *)&extra);
    /* A lock of the same name is another namespace. */
    leasehold_lease *lock = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &lock));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(p[0]));
    extra = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_acquire_permit(client, key, len, 3, 30000, 1000, &extra));
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(extra, 60000));
    for (int i = 0; i < 3; i++) {
        leasehold_lease_free(p[i]);
    }
    leasehold_lease_free(extra);
    leasehold_lease_free(lock);

    leasehold_lease *out = (leasehold_lease *)&out;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_permit(client, key, len, 0, 1000, &out));
    EXPECT_ERROR_MENTIONS("permits");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_try_acquire_permit(client, key, len, 65536, 1000, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_acquire_permit(client, key, len, UINT32_MAX, 1000, 10, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_permit(NULL, key, len, 3, 1000, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_permit(client, key, len, 3, 0, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_permit(client, key, len, 3, 1000, NULL));
    CHECK(out == (leasehold_lease *)&out);
}

static void restore_and_force(const leasehold_client *client) {
    char key[128], other[128];
    unique_key(key, sizeof key, "restore");
    unique_key(other, sizeof other, "restore-other");
    size_t len = strlen(key);
    leasehold_lease *original = NULL, *restored = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &original));
    char token[33];
    memcpy(token, leasehold_lease_token(original), sizeof token);
    EXPECT(LEASEHOLD_OK, leasehold_lease_restore(client, key, len, token, &restored));
    CHECK(leasehold_lease_fence(restored) == leasehold_lease_fence(original));
    CHECK(strcmp(leasehold_lease_token(restored), token) == 0);
    CHECK(leasehold_lease_remaining_ms(restored) > 10000);

    /* Bad tokens: NULL, empty, not 32 lowercase hex, another key's. */
    leasehold_lease *out = (leasehold_lease *)&out;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, NULL, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, "", &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, "xyz", &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_lease_restore(client, key, len, "ABCDEFABCDEFABCDEFABCDEFABCDEFAB", &out));
    EXPECT_ERROR_MENTIONS("32 lowercase");
    EXPECT(LEASEHOLD_LOST, leasehold_lease_restore(client, other, strlen(other), token, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(NULL, key, len, token, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, 0, token, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, token, NULL));
    CHECK(out == (leasehold_lease *)&out);

    /* Released through the restored handle: the original finds it gone. */
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(restored));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(original));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_restore(client, key, len, token, &out));
    CHECK(out == (leasehold_lease *)&out);
    leasehold_lease_free(restored);
    leasehold_lease_free(original);

    /* Force-release frees whoever holds it; the holder then finds it lost. */
    leasehold_lease *stuck = NULL, *next = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &stuck));
    EXPECT(LEASEHOLD_OK, leasehold_force_release(client, key, len));
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &next));
    CHECK(leasehold_lease_fence(next) > leasehold_lease_fence(stuck));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_extend(stuck, 1000));
    leasehold_lease_free(stuck);
    leasehold_lease_free(next);
    EXPECT(LEASEHOLD_OK, leasehold_force_release(client, key, len)); /* free: nothing to do */
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_force_release(NULL, key, len));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_force_release(client, NULL, len));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_force_release(client, key, 1025));
}

int main(void) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(env_or_die("LEASEHOLD_URL"), &client));
    shared_locks(client);
    semaphores(client);
    restore_and_force(client);
    leasehold_client_free(client);
    puts("kinds: ok");
    return 0;
}

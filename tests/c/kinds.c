/* The second version of the ABI on the backend LEASEHOLD_URL names: shared (read) locks, counting
 * semaphores, restoring a lease by key and token, and the operator's force-release; with the bad
 * inputs every layer must survive, for each (every one a clear status, no output written, nothing disturbed).
 *
 * A backend that documents a kind as missing (MySQL named locks: no shared locks, no restore) sets
 * LEASEHOLD_TEST_NO_SHARED / LEASEHOLD_TEST_NO_RESTORE to 1: the refused call must then be a clear
 * LEASEHOLD_INVALID_ARGUMENT that names LEASEHOLD_TEST_REFUSAL_HINT (what to use instead), writes
 * no output and disturbs nothing; every other check runs unchanged. LEASEHOLD_TEST_NO_PROMOTE=1
 * skips promote and demote, for a backend with shared locks that cannot swap their kind. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

static int env_flag(const char *name) {
    const char *value = getenv(name);
    return value != NULL && strcmp(value, "1") == 0;
}

/* Refused kinds name what to use instead: LEASEHOLD_TEST_REFUSAL_HINT must be set with either flag,
 * so a refusal is never checked against an empty needle. */
static const char *refusal_hint(void) { return env_or_die("LEASEHOLD_TEST_REFUSAL_HINT"); }

/* A backend without shared locks refuses them clearly, leaves the output alone, and the key stays
 * free for an exclusive lease (nothing half-taken). */
static void shared_refused(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "shared-refused");
    size_t len = strlen(key);
    leasehold_lease *r = (leasehold_lease *)&r, *w = NULL;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 30000, &r));
    EXPECT_ERROR_MENTIONS(refusal_hint());
    CHECK(r == (leasehold_lease *)&r);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_acquire_shared(client, key, len, 30000, 100, &r));
    EXPECT_ERROR_MENTIONS(refusal_hint());
    CHECK(r == (leasehold_lease *)&r);
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 30000, &w));
    /* Refused while a writer holds the key too, and the writer keeps it. */
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 30000, &r));
    CHECK(r == (leasehold_lease *)&r);
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(w, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(w));
    leasehold_lease_free(w);

    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(NULL, key, len, 1000, &r));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, NULL, len, 1000, &r));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, 0, 1000, &r));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 0, &r));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire_shared(client, key, len, 1000, NULL));
    CHECK(r == (leasehold_lease *)&r);
}

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

/* Promote and demote keep the token: a reader alone becomes the writer with a new fence, and a
 * writer becomes a reader that others may join. */
static void promote_and_demote(const leasehold_client *client) {
    char key[128];
    unique_key(key, sizeof key, "promote");
    size_t len = strlen(key);
    leasehold_lease *r1 = NULL, *r2 = NULL, *other = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire_shared(client, key, len, 30000, &r1));
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire_shared(client, key, len, 30000, &r2));
    char token[33];
    snprintf(token, sizeof token, "%s", leasehold_lease_token(r1));
    uint64_t fence = leasehold_lease_fence(r2);
    CHECK(leasehold_lease_is_shared(r1));
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_lease_promote(r1, 0));
    CHECK(leasehold_lease_remaining_ms(r1) > 0);
    CHECK(leasehold_lease_is_shared(r1));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_demote(r1)); /* not exclusive */
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(r2));
    EXPECT(LEASEHOLD_OK, leasehold_lease_promote(r1, 1000));
    CHECK(strcmp(token, leasehold_lease_token(r1)) == 0);
    CHECK(leasehold_lease_fence(r1) > fence);
    CHECK(!leasehold_lease_is_shared(r1));
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire_shared(client, key, len, 30000, &other));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_promote(r1, 0)); /* not shared */
    EXPECT(LEASEHOLD_OK, leasehold_lease_demote(r1));
    CHECK(leasehold_lease_is_shared(r1));
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire_shared(client, key, len, 30000, &other));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(other));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(r1));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_promote(NULL, 0));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_demote(NULL));
    CHECK(!leasehold_lease_is_shared(NULL));
    leasehold_lease_free(other);
    leasehold_lease_free(r1);
    leasehold_lease_free(r2);
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

static void restore_works(const leasehold_client *client, const char *key, const char *other,
                          leasehold_lease *original, const char *token);
static void restore_refused(const leasehold_client *client, const char *key,
                            leasehold_lease *original, const char *token);
static void force(const leasehold_client *client, const char *key);

static void restore_and_force(const leasehold_client *client) {
    char key[128], other[128];
    unique_key(key, sizeof key, "restore");
    unique_key(other, sizeof other, "restore-other");
    leasehold_lease *original = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &original));
    char token[33];
    memcpy(token, leasehold_lease_token(original), sizeof token);
    if (env_flag("LEASEHOLD_TEST_NO_RESTORE")) {
        restore_refused(client, key, original, token);
    } else {
        restore_works(client, key, other, original, token);
    }
    force(client, key);
}

static void restore_works(const leasehold_client *client, const char *key, const char *other,
                          leasehold_lease *original, const char *token) {
    size_t len = strlen(key);
    leasehold_lease *restored = NULL;
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
}

/* A backend without restore refuses it clearly, for a held key's true token and for bad ones,
 * writes no output, and the holder keeps its lease. */
static void restore_refused(const leasehold_client *client, const char *key,
                            leasehold_lease *original, const char *token) {
    size_t len = strlen(key);
    leasehold_lease *out = (leasehold_lease *)&out;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, token, &out));
    EXPECT_ERROR_MENTIONS(refusal_hint());
    CHECK(out == (leasehold_lease *)&out);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, NULL, &out));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_lease_restore(client, key, len, "ABCDEFABCDEFABCDEFABCDEFABCDEFAB", &out));
    EXPECT_ERROR_MENTIONS("32 lowercase");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_restore(client, key, len, token, NULL));
    CHECK(out == (leasehold_lease *)&out);
    leasehold_lease *other = (leasehold_lease *)&other;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, len, 30000, &other));
    CHECK(other == (leasehold_lease *)&other);
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(original, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(original));
    leasehold_lease_free(original);
}

static void force(const leasehold_client *client, const char *key) {
    size_t len = strlen(key);
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
    if (env_flag("LEASEHOLD_TEST_NO_SHARED")) {
        shared_refused(client);
    } else {
        shared_locks(client);
        if (!env_flag("LEASEHOLD_TEST_NO_PROMOTE")) {
            promote_and_demote(client);
        }
    }
    semaphores(client);
    restore_and_force(client);
    leasehold_client_free(client);
    puts("kinds: ok");
    return 0;
}

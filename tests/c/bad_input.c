/* Every bad input of docs/semantics.md §9 that C can pass: each gets a clear status, writes no output,
 * crashes nothing, and leaves an existing lease intact. LEASEHOLD_URL names a working backend;
 * LEASEHOLD_TEST_CLOSED_PORT is a loopback port where nothing listens. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdint.h>

#define SECRET "Sup3rS3cretPa55"

static void bad_url(const char *url, leasehold_status expected) {
    leasehold_client *client = (leasehold_client *)&client; /* sentinel: must stay untouched */
    EXPECT(expected, leasehold_client_open(url, &client));
    CHECK(client == (leasehold_client *)&client);
    CHECK(leasehold_last_error()[0] != '\0');
    CHECK(strstr(leasehold_last_error(), SECRET) == NULL);
}

static void urls(const char *closed_port) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_client_open(NULL, &client));
    EXPECT_ERROR_MENTIONS("url is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_client_open("file:///tmp/leasehold-c-test", NULL));
    EXPECT_ERROR_MENTIONS("client_out is NULL");

    bad_url("", LEASEHOLD_INVALID_ARGUMENT);
    EXPECT_ERROR_MENTIONS("empty");
    bad_url("not a url", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("mongodb://127.0.0.1/db", LEASEHOLD_INVALID_ARGUMENT);
    EXPECT_ERROR_MENTIONS("unknown URL scheme");
    bad_url("redis://127.0.0.1?bogus=1", LEASEHOLD_INVALID_ARGUMENT);
    EXPECT_ERROR_MENTIONS("bogus");
    bad_url("file:///tmp/x?bogus=1", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("redis://127.0.0.1:99999", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("redis://127.0.0.1:0", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("redis://127.0.0.1:port", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("redis://user:" SECRET "@127.0.0.1:notaport", LEASEHOLD_INVALID_ARGUMENT);
    bad_url("redis://:" SECRET "@127.0.0.1?bogus=" SECRET, LEASEHOLD_INVALID_ARGUMENT);
    bad_url("file:///tmp/\xff\xfe", LEASEHOLD_INVALID_ARGUMENT);
    EXPECT_ERROR_MENTIONS("UTF-8");
    bad_url("file://relative", LEASEHOLD_INVALID_ARGUMENT);

    /* A host that does not answer: Unavailable, promptly, and without the password; either at
     * open or at the first call, depending on whether the backend connects eagerly. */
    char url[256];
    snprintf(url, sizeof url,
             "redis://leaseholder:" SECRET "@127.0.0.1:%s?connect_timeout_ms=500&io_timeout_ms=500",
             closed_port);
    double start = now_seconds();
    leasehold_status status = leasehold_client_open(url, &client);
    CHECK(status == LEASEHOLD_OK || status == LEASEHOLD_UNAVAILABLE);
    CHECK(strstr(leasehold_last_error(), SECRET) == NULL);
    if (status == LEASEHOLD_OK) {
        leasehold_lease *lease = NULL;
        EXPECT(LEASEHOLD_UNAVAILABLE, leasehold_try_acquire(client, "k", 1, 1000, &lease));
        CHECK(lease == NULL);
        CHECK(strstr(leasehold_last_error(), SECRET) == NULL);
        EXPECT(LEASEHOLD_UNAVAILABLE, leasehold_acquire(client, "k", 1, 1000, 300, &lease));
        CHECK(strstr(leasehold_last_error(), SECRET) == NULL);
        leasehold_client_free(client);
    }
    /* Generous: the bound is 0.5 s + 0.5 s per call, but valgrind and a loaded CI are slow. */
    CHECK(now_seconds() - start < 20.0);
}

static void acquire_arguments(const leasehold_client *client, const char *held_key) {
    leasehold_lease *const sentinel = (leasehold_lease *)&sentinel;
    leasehold_lease *lease = sentinel;
    const char *key = "bad-input:k";
    size_t len = strlen(key);

    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(NULL, key, len, 1000, &lease));
    EXPECT_ERROR_MENTIONS("client is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_acquire(NULL, key, len, 1000, 10, &lease));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, NULL, 5, 1000, &lease));
    EXPECT_ERROR_MENTIONS("key is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, NULL, 0, 1000, &lease));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, key, 0, 1000, &lease));
    EXPECT_ERROR_MENTIONS("empty");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, key, len, 1000, NULL));
    EXPECT_ERROR_MENTIONS("lease_out is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_acquire(client, key, len, 1000, 10, NULL));

    /* Too long: refused from the length alone, before a byte is read. */
    char *mib = malloc(1u << 20);
    CHECK(mib != NULL);
    memset(mib, 'm', 1u << 20);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, mib, 1u << 20, 1000, &lease));
    EXPECT_ERROR_MENTIONS("1024");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, mib, 1025, 1000, &lease));
    free(mib);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, "k", SIZE_MAX, 1000, &lease));

    const uint64_t bad_ttls[] = {0, UINT64_C(1) << 31, UINT64_C(1) << 63, UINT64_MAX,
                                 UINT64_C(604800001)};
    for (size_t i = 0; i < sizeof bad_ttls / sizeof bad_ttls[0]; i++) {
        EXPECT(LEASEHOLD_INVALID_ARGUMENT,
               leasehold_try_acquire(client, key, len, bad_ttls[i], &lease));
        EXPECT_ERROR_MENTIONS("ttl");
        EXPECT(LEASEHOLD_INVALID_ARGUMENT,
               leasehold_acquire(client, key, len, bad_ttls[i], 10, &lease));
    }
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_acquire(client, key, len, 1000, UINT64_MAX, &lease));
    EXPECT_ERROR_MENTIONS("wait");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT,
           leasehold_acquire(client, key, len, 1000, UINT64_C(1) << 63, &lease));
    CHECK(lease == sentinel);

    /* None of that took the key; the held key stays held. */
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, len, 1000, &lease));
    CHECK(lease != sentinel);
    leasehold_lease_free(lease);
    lease = sentinel;
    EXPECT(LEASEHOLD_NOT_ACQUIRED,
           leasehold_try_acquire(client, held_key, strlen(held_key), 1000, &lease));
    CHECK(lease == sentinel);
}

static void lease_arguments(leasehold_lease *held) {
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_release(NULL));
    EXPECT_ERROR_MENTIONS("lease is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_extend(NULL, 1000));
    CHECK(leasehold_lease_fence(NULL) == 0);
    CHECK(leasehold_lease_remaining_ms(NULL) == 0);
    CHECK(leasehold_lease_token(NULL) == NULL);
    leasehold_lease_free(NULL);
    leasehold_client_free(NULL);

    const uint64_t bad_ttls[] = {0, UINT64_C(1) << 31, UINT64_C(1) << 63, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad_ttls / sizeof bad_ttls[0]; i++) {
        EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_extend(held, bad_ttls[i]));
    }
    /* Still held, with its full time. */
    CHECK(leasehold_lease_remaining_ms(held) > 20000);
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    const char *closed_port = env_or_die("LEASEHOLD_TEST_CLOSED_PORT");
    CHECK(leasehold_version() != NULL && leasehold_version()[0] != '\0');
    CHECK(leasehold_last_error() != NULL && leasehold_last_error()[0] == '\0');

    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char held_key[128];
    unique_key(held_key, sizeof held_key, "held");
    leasehold_lease *held = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, held_key, strlen(held_key), 30000, &held));
    uint64_t fence = leasehold_lease_fence(held);

    urls(closed_port);
    acquire_arguments(client, held_key);
    lease_arguments(held);

    /* The lease survived all of it. */
    CHECK(leasehold_lease_fence(held) == fence);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(held));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_release(held));
    EXPECT_ERROR_MENTIONS("already released");
    leasehold_lease_free(held);
    leasehold_client_free(client);
    printf("bad_input: ok\n");
    return 0;
}

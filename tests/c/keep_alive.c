/* Keep-alive on the backend LEASEHOLD_URL names: a 1 s lease kept for 3 s while another client
 * is refused; renewal stopping on release, free, switch-off and in a fork() child; and a loss (the
 * lock deleted underneath) that shows as remaining_ms <= 0, LEASEHOLD_LOST from release, and in
 * leasehold_lease_keep_alive_status. */
#define _POSIX_C_SOURCE 200809L
#include "underneath.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <sys/wait.h>

/* The TTL of the kept-alive leases. Renewal comes every third of it; under valgrind, which runs one
 * thread at a time, on a loaded 2-core machine a 300 ms lease lapsed between two renewals (the renewal
 * thread did not run for a whole TTL), so the scenarios use a TTL that a scheduling stall does not
 * outlast, and wait in multiples of it. */
#define TTL_MS 1000

static leasehold_lease *take(const leasehold_client *client, const char *key, uint64_t ttl_ms) {
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), ttl_ms, &lease));
    return lease;
}

static void refused(const leasehold_client *client, const char *key) {
    leasehold_lease *probe = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, strlen(key), 1000, &probe));
    CHECK(probe == NULL);
}

/* Free again: another client takes the key at once, and gives it back. */
static void taken_by(const leasehold_client *client, const char *key) {
    leasehold_lease *lease = take(client, key, 30000);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
}

static void kept_for_three_seconds(const leasehold_client *client, const leasehold_client *other) {
    char key[64];
    plain_key(key, sizeof key, "ka-kept");
    leasehold_lease *lease = take(client, key, TTL_MS);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true)); /* twice is the same as once */
    double start = now_seconds();
    int probes = 0;
    while (now_seconds() - start < 3.0) {
        CHECK(leasehold_lease_remaining_ms(lease) > 0);
        refused(other, key);
        probes++;
        sleep_ms(100);
    }
    CHECK(probes >= 5);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive_status(lease));
    /* A checkpoint passes with a margin the lease has, and stops the job with one it has not. */
    EXPECT(LEASEHOLD_OK, leasehold_lease_check(lease, 0));
    EXPECT(LEASEHOLD_OK, leasehold_lease_check(lease, 10));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_check(lease, 60 * 60 * 1000));
    EXPECT_ERROR_MENTIONS("margin");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_check(NULL, 0));
    char *stats = stats_copy(client);
    /* 3 s at one renewal per third of the TTL (9); a loaded machine (valgrind) renews less often. */
    CHECK(stat_of(stats, "keepalive_renewals") >= 2);
    CHECK(stat_of(stats, "keepalive_failures") == 0);
    free(stats);
    /* The renewals extended the lease: release finds it ours. */
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    CHECK(leasehold_lease_remaining_ms(lease) <= 0);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive(lease, true));
    EXPECT_ERROR_MENTIONS("already released");
    EXPECT(LEASEHOLD_LOST, leasehold_lease_check(lease, 0));
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive_status(lease));
    leasehold_lease_free(lease);
    taken_by(other, key);
}

static void stops_when_switched_off_or_freed(const leasehold_client *client,
                                             const leasehold_client *other) {
    char key[64];
    plain_key(key, sizeof key, "ka-off");
    leasehold_lease *lease = take(client, key, TTL_MS);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    sleep_ms(TTL_MS * 3 / 2); /* past the TTL: only renewal keeps it */
    refused(other, key);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, false));
    /* No more renewals: the lease runs out at its TTL and someone else may take the key. */
    double start = now_seconds();
    while (leasehold_lease_remaining_ms(lease) > 0) {
        CHECK(now_seconds() - start < 10.0);
        sleep_ms(20);
    }
    sleep_ms(400); /* beyond the drift allowance, so the backend agrees it expired */
    taken_by(other, key);
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(lease));
    leasehold_lease_free(lease);

    /* Freeing a kept-alive lease releases it and ends its renewal. */
    plain_key(key, sizeof key, "ka-free");
    lease = take(client, key, TTL_MS);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    sleep_ms(200);
    leasehold_lease_free(lease);
    taken_by(other, key);
}

/* What the keep-alive failure callback saw: how often, and the last status. */
struct failures {
    _Atomic int calls;
    _Atomic int last;
};

static void on_failure(void *user_data, leasehold_status status) {
    struct failures *seen = user_data;
    atomic_store(&seen->last, (int)status);
    atomic_fetch_add(&seen->calls, 1);
}

static void lost_when_deleted_underneath(const char *url) {
    /* A client of its own, so the counts below are this scenario's alone. */
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char key[64];
    plain_key(key, sizeof key, "ka-lost");
    leasehold_lease *lease = take(client, key, TTL_MS);
    static struct failures seen;
    EXPECT(LEASEHOLD_OK, leasehold_lease_on_keep_alive_failure(lease, on_failure, &seen));
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    sleep_ms(TTL_MS + 300);
    CHECK(leasehold_lease_remaining_ms(lease) > 0);
    CHECK(atomic_load(&seen.calls) == 0);
    delete_underneath(key);
    /* The next renewal (within a third of the TTL) finds the lease lost. */
    double start = now_seconds();
    while (leasehold_lease_remaining_ms(lease) > 0) {
        CHECK(now_seconds() - start < 20.0);
        sleep_ms(10);
    }
    EXPECT(LEASEHOLD_LOST, leasehold_lease_keep_alive_status(lease));
    EXPECT_ERROR_MENTIONS("lost");
    /* The callback was told, once, from the keep-alive thread. */
    start = now_seconds();
    while (atomic_load(&seen.calls) == 0) {
        CHECK(now_seconds() - start < 5.0);
        sleep_ms(1);
    }
    CHECK(atomic_load(&seen.calls) == 1);
    CHECK(atomic_load(&seen.last) == LEASEHOLD_LOST);
    /* A long job's checkpoint says so too, whatever the margin. */
    EXPECT(LEASEHOLD_LOST, leasehold_lease_check(lease, 0));
    /* Renewal stopped for good: still lost a while later, and release says so. */
    sleep_ms(300);
    CHECK(leasehold_lease_remaining_ms(lease) <= 0);
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(lease));
    EXPECT(LEASEHOLD_LOST, leasehold_lease_keep_alive_status(lease));
    leasehold_lease_free(lease);
    char *stats = stats_copy(client);
    CHECK(stat_of(stats, "keepalive_failures") == 1);
    CHECK(stat_of(stats, "extends_lost") == 1);
    CHECK(stat_of(stats, "releases_lost") == 1);
    free(stats);
    /* The key is free for anyone now. */
    taken_by(client, key);
    leasehold_client_free(client);
}

/* A fork() child can neither switch the parent's renewal nor read it, and its exit ends nothing:
 * the parent keeps renewing. */
static void fork_child_touches_nothing(const leasehold_client *client,
                                       const leasehold_client *other) {
    char key[64];
    plain_key(key, sizeof key, "ka-fork");
    leasehold_lease *lease = take(client, key, TTL_MS);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive(lease, false));
        EXPECT_ERROR_MENTIONS("another process");
        EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive(lease, true));
        EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive_status(lease));
        EXPECT_ERROR_MENTIONS("another process");
        leasehold_lease_free(lease); /* forgets the handle; the parent's lock and renewal go on */
        /* Ends the child without valgrind's leak check of it: the parent's renewal thread does not
         * exist here, so what only its stack pointed to looks lost in the child. That is fork()'s
         * doing (the memory is the parent's, reachable there), not a leak; the parent is checked. */
        fflush(NULL);
        execl("/bin/true", "true", (char *)NULL);
        _exit(1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sleep_ms(2 * TTL_MS); /* two TTLs: only renewal keeps it */
    CHECK(leasehold_lease_remaining_ms(lease) > 0);
    refused(other, key);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive_status(lease));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
}

/* Valgrind may take longer to start a thread than a short TTL lasts, and the first keep-alive of the
 * process starts the renewal thread; start it on a long lease so the timed scenarios measure
 * renewal, not valgrind's thread start. */
static void warm_up(const leasehold_client *client) {
    char key[64];
    plain_key(key, sizeof key, "ka-warm");
    leasehold_lease *lease = take(client, key, 60000);
    EXPECT(LEASEHOLD_OK, leasehold_lease_keep_alive(lease, true));
    sleep_ms(200);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
}

static void null_arguments(void) {
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive(NULL, true));
    EXPECT_ERROR_MENTIONS("lease is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive(NULL, false));
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_keep_alive_status(NULL));
    EXPECT_ERROR_MENTIONS("lease is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_on_keep_alive_failure(NULL, on_failure, NULL));
    EXPECT_ERROR_MENTIONS("lease is NULL");
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    null_arguments();
    leasehold_client *client = NULL, *other = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &other));
    warm_up(client);
    kept_for_three_seconds(client, other);
    stops_when_switched_off_or_freed(client, other);
    lost_when_deleted_underneath(url);
    fork_child_touches_nothing(client, other);
    leasehold_client_free(client);
    leasehold_client_free(other);
    printf("keep_alive: ok\n");
    return 0;
}

/* leasehold_client_open_persistent: one shared client per URL in a process, references freed like
 * any client, the shared client living on (counters included) after every reference is gone, other
 * URLs and plain clients kept apart, and a fork() child's own cache. */
#define _POSIX_C_SOURCE 200809L
#include "underneath.h"

#include <sys/types.h>
#include <sys/wait.h>

static unsigned long long acquired(const leasehold_client *client) {
    char *json = stats_copy(client);
    unsigned long long n = stat_of(json, "acquired");
    free(json);
    return n;
}

static void cycle(const leasehold_client *client, const char *key) {
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &lease));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
}

static void shared_per_url(const char *url) {
    char key[64];
    plain_key(key, sizeof key, "pc-shared");
    /* "Request" one: open, lock, free. */
    leasehold_client *first = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &first));
    unsigned long long before = acquired(first); /* other scenarios may have used this URL */
    cycle(first, key);
    leasehold_lease *held = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(first, key, strlen(key), 30000, &held));
    leasehold_client *second = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &second));
    CHECK(acquired(second) == before + 2); /* one client behind both references */
    leasehold_client_free(first);
    /* The other reference still works, and sees the lock the first took. */
    leasehold_lease *probe = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED,
           leasehold_try_acquire(second, key, strlen(key), 30000, &probe));
    leasehold_lease_free(held);
    leasehold_client_free(second);

    /* "Request" two, after every reference was freed: the same client, counters and all. */
    leasehold_client *third = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &third));
    CHECK(acquired(third) == before + 2);
    cycle(third, key);
    CHECK(acquired(third) == before + 3);

    /* A plain client, and another URL, are separate clients. */
    leasehold_client *plain = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &plain));
    CHECK(acquired(plain) == 0);
    leasehold_client_free(plain);
    char other_url[4096];
    snprintf(other_url, sizeof other_url, "%s%sprefix=pc-other:", url,
             strchr(url, '?') ? "&" : "?");
    leasehold_client *other = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(other_url, &other));
    CHECK(acquired(other) == 0);
    cycle(other, key); /* another prefix: another key, free although `third` could hold it */
    const char *metrics = leasehold_client_metrics(other);
    CHECK(metrics != NULL && strstr(metrics, "prefix=\"pc-other:\"") != NULL);
    leasehold_client_free(other);
    leasehold_client_free(third);
}

static void bad_arguments(const char *url) {
    leasehold_client *untouched = (leasehold_client *)&untouched;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_client_open_persistent(NULL, &untouched));
    EXPECT_ERROR_MENTIONS("url is NULL");
    CHECK(untouched == (leasehold_client *)&untouched);
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_client_open_persistent(url, NULL));
    EXPECT_ERROR_MENTIONS("client_out is NULL");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_client_open_persistent("nope://x", &untouched));
    CHECK(untouched == (leasehold_client *)&untouched);
    /* A password never shows in the error, and a failure is not cached. */
    char closed[128];
    snprintf(closed, sizeof closed,
             "redis://:pers1st3nt-secret@127.0.0.1:%s?connect_timeout_ms=200&io_timeout_ms=200",
             env_or_die("LEASEHOLD_TEST_CLOSED_PORT"));
    for (int i = 0; i < 2; i++) {
        leasehold_status s = leasehold_client_open_persistent(closed, &untouched);
        if (s == LEASEHOLD_OK) {
            /* A lazily connecting backend reports the closed port on first use instead. */
            leasehold_lease *lease = NULL;
            EXPECT(LEASEHOLD_UNAVAILABLE, leasehold_try_acquire(untouched, "k", 1, 1000, &lease));
            leasehold_client_free(untouched);
            untouched = (leasehold_client *)&untouched;
        } else {
            CHECK(s == LEASEHOLD_UNAVAILABLE);
            CHECK(untouched == (leasehold_client *)&untouched);
        }
        CHECK(strstr(leasehold_last_error(), "pers1st3nt-secret") == NULL);
    }
}

/* A fork() child gets a client of its own for the same URL: counting from zero, never the
 * parent's connections. */
static void fork_child_has_its_own(const char *url) {
    leasehold_client *parent = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &parent));
    char key[64];
    plain_key(key, sizeof key, "pc-fork");
    cycle(parent, key);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        leasehold_client *child = NULL;
        EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &child));
        CHECK(acquired(child) == 0);
        cycle(child, key);
        CHECK(acquired(child) == 1);
        leasehold_client_free(child);
        leasehold_client_free(parent);
        exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(acquired(parent) >= 1);
    unsigned long long mine = acquired(parent);
    cycle(parent, key);
    CHECK(acquired(parent) == mine + 1);
    leasehold_client_free(parent);
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    bad_arguments(url);
    shared_per_url(url);
    fork_child_has_its_own(url);
    printf("persistent: ok\n");
    return 0;
}

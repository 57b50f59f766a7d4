/* leasehold_client_stats_json and leasehold_client_metrics on the backend LEASEHOLD_URL names: a
 * scripted sequence (acquire, contention, loss, release) counted exactly; the JSON and the
 * Prometheus text are printed between markers for the Rust harness to parse. */
#define _POSIX_C_SOURCE 200809L
#include "underneath.h"

static void expect_stat(const char *json, const char *name, unsigned long long expected) {
    unsigned long long got = stat_of(json, name);
    if (got != expected) {
        fprintf(stderr, "stats: %s is %llu, expected %llu in %s\n", name, got, expected, json);
        exit(1);
    }
}

static void expect_errors_zero(const char *json) {
    const char *errors = strstr(json, "\"errors\":{");
    CHECK(errors != NULL);
    const char *kinds[] = {"not_acquired", "lost", "unavailable", "invalid_argument", "internal"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        expect_stat(errors, kinds[i], 0);
    }
}

static void counts_a_scripted_sequence(const char *url) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));

    char *fresh = stats_copy(client);
    expect_stat(fresh, "acquire_attempts", 0);
    expect_stat(fresh, "acquired", 0);
    free(fresh);

    char key[64];
    plain_key(key, sizeof key, "st-seq");
    /* Acquire. */
    leasehold_lease *first = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &first));
    /* Contention. */
    leasehold_lease *refused = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED,
           leasehold_try_acquire(client, key, strlen(key), 30000, &refused));
    /* Loss: the lock vanishes underneath; release finds it gone (well before its deadline, so it
     * is not counted as expired). */
    delete_underneath(key);
    EXPECT(LEASEHOLD_LOST, leasehold_lease_release(first));
    leasehold_lease_free(first);
    /* Acquire, extend, release. */
    leasehold_lease *second = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 30000, &second));
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(second, 30000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(second));
    leasehold_lease_free(second);

    char *json = stats_copy(client);
    expect_stat(json, "acquire_attempts", 3);
    expect_stat(json, "acquired", 2);
    expect_stat(json, "not_acquired", 1);
    expect_stat(json, "releases_ok", 1);
    expect_stat(json, "releases_lost", 1);
    expect_stat(json, "extends_ok", 1);
    expect_stat(json, "extends_lost", 0);
    expect_stat(json, "expired", 0);
    expect_stat(json, "keepalive_renewals", 0);
    expect_stat(json, "keepalive_failures", 0);
    expect_stat(json, "retries", 0);
    expect_errors_zero(json);
    /* Histograms: three acquires waited, one lease was held to its release, and six single calls
     * (three acquire attempts, two releases, one extend) went to the backend. */
    const char *wait = strstr(json, "\"wait_seconds\":");
    const char *hold = strstr(json, "\"hold_seconds\":");
    const char *round_trip = strstr(json, "\"round_trip_seconds\":");
    CHECK(wait != NULL && hold != NULL && round_trip != NULL);
    expect_stat(wait, "count", 3);
    expect_stat(hold, "count", 1);
    expect_stat(round_trip, "count", 6);
    printf("STATS_JSON %s\n", json);
    free(json);

    /* A bad argument is refused at the boundary: not an attempt, nothing counted. */
    leasehold_lease *none = NULL;
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_try_acquire(client, key, strlen(key), 0, &none));
    json = stats_copy(client);
    expect_stat(json, "acquire_attempts", 3);
    free(json);

    const char *metrics = leasehold_client_metrics(client);
    CHECK(metrics != NULL);
    printf("METRICS_BEGIN\n%sMETRICS_END\n", metrics);
    CHECK(strstr(metrics, "# TYPE leasehold_acquired_total counter\n") != NULL);
    CHECK(strstr(metrics, "leasehold_acquire_attempts_total{backend=\"") != NULL);
    CHECK(strstr(metrics, ",prefix=\"leasehold:\"} 3\n") != NULL);
    CHECK(strstr(metrics, "leasehold_releases_lost_total{") != NULL);
    CHECK(strstr(metrics, "leasehold_errors_total{") != NULL);
    CHECK(strstr(metrics, ",kind=\"unavailable\"} 0\n") != NULL);
    CHECK(strstr(metrics, "# TYPE leasehold_wait_seconds histogram\n") != NULL);
    CHECK(strstr(metrics, ",le=\"+Inf\"} 3\n") != NULL);
    CHECK(strstr(metrics, "leasehold_hold_seconds_count{") != NULL);
    CHECK(strstr(metrics, "leasehold_round_trip_seconds_sum{") != NULL);
    CHECK(strstr(metrics, key) == NULL); /* never a key */
    leasehold_client_free(client);
}

/* A new client counts from zero; a lease freed after its client still counts into it. */
static void clients_count_apart(const char *url) {
    leasehold_client *a = NULL, *b = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &a));
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &b));
    char key[64];
    plain_key(key, sizeof key, "st-apart");
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(a, key, strlen(key), 30000, &lease));
    char *json = stats_copy(b);
    expect_stat(json, "acquired", 0);
    free(json);
    json = stats_copy(a);
    expect_stat(json, "acquired", 1);
    free(json);
    leasehold_client_free(a);
    leasehold_lease_free(lease);
    leasehold_client_free(b);
}

/* leasehold_client_retries reads the JSON's `retries` alone: the same count, after a wait. */
static void retries_read_alone(const char *url) {
    leasehold_client *a = NULL, *b = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &a));
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &b));
    char key[64];
    plain_key(key, sizeof key, "st-retries");
    leasehold_lease *held = NULL, *waited = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(a, key, strlen(key), 30000, &held));
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_acquire(b, key, strlen(key), 30000, 200, &waited));
    char *json = stats_copy(b);
    expect_stat(json, "retries", leasehold_client_retries(b));
    free(json);
    leasehold_lease_free(held);
    leasehold_client_free(a);
    leasehold_client_free(b);
}

static void null_arguments(void) {
    CHECK(leasehold_client_stats_json(NULL) == NULL);
    EXPECT_ERROR_MENTIONS("leasehold_client_stats_json: invalid argument: client is NULL");
    CHECK(leasehold_client_metrics(NULL) == NULL);
    EXPECT_ERROR_MENTIONS("leasehold_client_metrics: invalid argument: client is NULL");
    CHECK(leasehold_client_retries(NULL) == 0);
    EXPECT_ERROR_MENTIONS("leasehold_client_retries: invalid argument: client is NULL");
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    null_arguments();
    counts_a_scripted_sequence(url);
    clients_count_apart(url);
    retries_read_alone(url);
    printf("stats: ok\n");
    return 0;
}

/* Seeded random inputs at every C entry point, run under valgrind by
 * crates/leasehold-ffi/tests/c_abi.rs: arbitrary bytes and lengths for URLs, keys and tokens,
 * edge and random numbers for TTLs, waits and permits, NULL pointers, and lease calls in any
 * order. Every call must return one of the documented statuses (the one the header promises when
 * an argument is out of range), leave the output pointer alone unless it succeeds, never leak the
 * URL's password into leasehold_last_error(), and never make valgrind complain.
 *
 * LEASEHOLD_URL names a working backend; LEASEHOLD_FUZZ_SEED (default: the time) and
 * LEASEHOLD_FUZZ_CASES (default 3000) bound the run. The seed is printed first, so a failure can be
 * replayed with the same seed. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>

#define SECRET "Fuzz-S3cret-Pa55"
#define KEY_MAX 1024u
#define TTL_MAX 604800000ull
#define PERMITS_MAX 65535u

static uint64_t state;

static uint64_t next(void) { /* xorshift64* */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ull;
}

static uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

static bool chance(unsigned percent) { return below(100) < percent; }

static void random_bytes(char *buf, size_t len) {
    for (size_t i = 0; i < len; i++) {
        buf[i] = (char)(next() & 0xff);
    }
}

/* Edge values around each documented range, or anything at all. */
static uint64_t random_u64(uint64_t max) {
    switch (below(8)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return max;
    case 3: return max + 1;
    case 4: return UINT64_MAX;
    case 5: return (uint64_t)INT64_MAX + 1;
    case 6: return next();
    default: return 1 + below(max);
    }
}

static bool known(leasehold_status s) {
    switch (s) {
    case LEASEHOLD_OK:
    case LEASEHOLD_NOT_ACQUIRED:
    case LEASEHOLD_LOST:
    case LEASEHOLD_UNAVAILABLE:
    case LEASEHOLD_INVALID_ARGUMENT:
    case LEASEHOLD_INTERNAL:
    case LEASEHOLD_INTERRUPTED:
    case LEASEHOLD_STALE_FENCE:
    case LEASEHOLD_INCOMPLETE_ATTEMPT:
        return true;
    }
    return false;
}

static void check_status(leasehold_status s, const char *what, uint64_t n) {
    if (!known(s)) {
        fprintf(stderr, "case %" PRIu64 ": %s returned unknown status %d\n", n, what, (int)s);
        exit(1);
    }
    if (s == LEASEHOLD_INTERNAL) {
        fprintf(stderr, "case %" PRIu64 ": %s returned LEASEHOLD_INTERNAL: %s\n", n, what,
                leasehold_last_error());
        exit(1);
    }
    if (s != LEASEHOLD_OK && strstr(leasehold_last_error(), SECRET) != NULL) {
        fprintf(stderr, "case %" PRIu64 ": %s leaked the password: %s\n", n, what,
                leasehold_last_error());
        exit(1);
    }
}

#define EXPECT_CASE(cond, what)                                                                  \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "case %" PRIu64 ": %s: check failed: %s (status %s, error \"%s\")\n", \
                    n, what, #cond, status_name(s), leasehold_last_error());                     \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* A URL that never connects: random bytes, sometimes after a real scheme and credentials, with
 * `?`, `#` and `&` taken out and an unknown parameter added, so any URL that parses is refused
 * for that parameter before anything is contacted. */
static void fuzz_url(uint64_t n) {
    static const char *const prefixes[] = {
        "", "redis://", "rediss://", "redis://u:" SECRET "@", "rediss://:" SECRET "@",
        "redlock://", "redlocks://:" SECRET "@", "redis+cluster://", "rediss+sentinel://",
        "redis+unix://", "postgres://u:" SECRET "@", "postgresql://", "file://", "file:///",
    };
    char url[512];
    const char *prefix = prefixes[below(sizeof prefixes / sizeof prefixes[0])];
    size_t plen = strlen(prefix);
    size_t len = (size_t)below(300);
    memcpy(url, prefix, plen);
    random_bytes(url + plen, len);
    for (size_t i = plen; i < plen + len; i++) {
        char c = url[i];
        if (c == '\0' || c == '?' || c == '#' || c == '&') {
            url[i] = 'x';
        }
    }
    const char suffix[] = "?fuzz_unknown_parameter=1";
    memcpy(url + plen + len, suffix, sizeof suffix);
    leasehold_client *client = (leasehold_client *)&client;
    leasehold_status s = chance(50) ? leasehold_client_open(url, &client)
                                    : leasehold_client_open_persistent(url, &client);
    check_status(s, "client_open", n);
    EXPECT_CASE(s == LEASEHOLD_INVALID_ARGUMENT, "client_open");
    EXPECT_CASE(client == (leasehold_client *)&client, "client_open leaves client_out");
    EXPECT_CASE(leasehold_last_error()[0] != '\0', "client_open says why");
}

/* Raw bytes with no suffix: whatever they are, a status and no crash. */
static void fuzz_raw_url(uint64_t n) {
    char url[300];
    size_t len = (size_t)below(sizeof url - 1);
    random_bytes(url, len);
    url[len] = '\0';
    /* A URL of raw bytes naming a real directory is vanishingly unlikely, but never create one. */
    if (strncmp(url, "file:", 5) == 0) {
        url[0] = 'x';
    }
    leasehold_client *client = NULL;
    leasehold_status s = leasehold_client_open(url, &client);
    check_status(s, "client_open(raw)", n);
    if (s == LEASEHOLD_OK) {
        leasehold_client_free(client);
    }
}

struct key {
    const char *ptr;
    size_t len;
    bool valid;
    char buf[KEY_MAX + 8];
};

/* A key of any length (lengths past the maximum over a short buffer: the length is checked before
 * the bytes are read), any bytes, sometimes NULL. */
static void random_key(struct key *k) {
    size_t len;
    switch (below(6)) {
    case 0: len = 0; break;
    case 1: len = KEY_MAX; break;
    case 2: len = KEY_MAX + 1; break;
    case 3: len = SIZE_MAX; break;
    default: len = 1 + (size_t)below(40); break;
    }
    size_t filled = len <= KEY_MAX ? len : 8;
    random_bytes(k->buf, filled);
    /* A small key space, so calls meet each other's leases. */
    if (len > 0 && len <= KEY_MAX && chance(50)) {
        k->buf[0] = (char)('a' + below(4));
        len = 1;
    }
    k->ptr = chance(5) ? NULL : k->buf;
    k->len = len;
    k->valid = k->ptr != NULL && len >= 1 && len <= KEY_MAX;
}

#define HELD 8
static leasehold_lease *held[HELD];

static void keep(leasehold_lease *lease) {
    unsigned slot = (unsigned)below(HELD);
    if (held[slot] != NULL) {
        leasehold_lease_free(held[slot]);
    }
    held[slot] = lease;
}

static void fuzz_acquire(const leasehold_client *client, uint64_t n) {
    struct key k;
    random_key(&k);
    uint64_t ttl = random_u64(TTL_MAX);
    /* A valid wait stays tiny (the run must stay short); invalid ones must be refused at once. */
    uint64_t wait = chance(20) ? random_u64(TTL_MAX) : below(3);
    if (wait <= TTL_MAX) {
        wait = below(3);
    }
    uint32_t permits = (uint32_t)random_u64(PERMITS_MAX);
    bool ttl_ok = ttl >= 1 && ttl <= TTL_MAX;
    bool wait_ok = wait <= TTL_MAX;
    bool permits_ok = permits >= 1 && permits <= PERMITS_MAX;
    leasehold_lease *sentinel = (leasehold_lease *)&k;
    leasehold_lease *lease = sentinel;
    leasehold_lease **out = chance(5) ? NULL : &lease;
    const leasehold_client *c = chance(3) ? NULL : client;
    bool valid = k.valid && ttl_ok && out != NULL && c != NULL;
    leasehold_status s;
    const char *what;
    bool permit = false;
    switch (below(6)) {
    case 0:
        what = "try_acquire";
        s = leasehold_try_acquire(c, k.ptr, k.len, ttl, out);
        break;
    case 1:
        what = "acquire";
        s = leasehold_acquire(c, k.ptr, k.len, ttl, wait, out);
        valid = valid && wait_ok;
        break;
    case 2:
        what = "try_acquire_shared";
        s = leasehold_try_acquire_shared(c, k.ptr, k.len, ttl, out);
        break;
    case 3:
        what = "acquire_shared";
        s = leasehold_acquire_shared(c, k.ptr, k.len, ttl, wait, out);
        valid = valid && wait_ok;
        break;
    case 4:
        what = "try_acquire_permit";
        s = leasehold_try_acquire_permit(c, k.ptr, k.len, permits, ttl, out);
        valid = valid && permits_ok;
        permit = true;
        break;
    default:
        what = "acquire_permit";
        s = leasehold_acquire_permit(c, k.ptr, k.len, permits, ttl, wait, out);
        valid = valid && permits_ok && wait_ok;
        permit = true;
        break;
    }
    check_status(s, what, n);
    if (!valid) {
        EXPECT_CASE(s == LEASEHOLD_INVALID_ARGUMENT, what);
    } else if (permit && s == LEASEHOLD_INVALID_ARGUMENT) {
        /* Documented: a semaphore held under another size refuses this one while it has holders. */
        EXPECT_CASE(strstr(leasehold_last_error(), "must ask for the same number") != NULL, what);
    } else {
        EXPECT_CASE(s == LEASEHOLD_OK || s == LEASEHOLD_NOT_ACQUIRED, what);
    }
    if (s == LEASEHOLD_OK) {
        EXPECT_CASE(lease != sentinel && lease != NULL, what);
        keep(lease);
    } else if (out != NULL) {
        EXPECT_CASE(lease == sentinel, what);
    }
}

static void fuzz_restore_and_force(const leasehold_client *client, uint64_t n) {
    struct key k;
    random_key(&k);
    char token[80];
    const char *t = token;
    switch (below(4)) {
    case 0: /* random bytes */ {
        size_t len = (size_t)below(sizeof token - 1);
        random_bytes(token, len);
        token[len] = '\0';
        break;
    }
    case 1: /* well-formed, someone else's (or nobody's) */
        for (int i = 0; i < 32; i++) {
            token[i] = "0123456789abcdef"[below(16)];
        }
        token[32] = '\0';
        break;
    case 2: /* a held lease's own */ {
        leasehold_lease *lease = held[below(HELD)];
        const char *own = lease != NULL ? leasehold_lease_token(lease) : NULL;
        if (own != NULL) {
            snprintf(token, sizeof token, "%s", own);
        } else {
            token[0] = '\0';
        }
        break;
    }
    default:
        t = NULL;
        break;
    }
    leasehold_lease *sentinel = (leasehold_lease *)&k;
    leasehold_lease *lease = sentinel;
    leasehold_status s;
    if (chance(80)) {
        s = leasehold_lease_restore(client, k.ptr, k.len, t, &lease);
        check_status(s, "lease_restore", n);
        bool token_ok = t != NULL && strlen(t) == 32 && strspn(t, "0123456789abcdef") == 32;
        if (!k.valid || !token_ok) {
            EXPECT_CASE(s == LEASEHOLD_INVALID_ARGUMENT, "lease_restore");
        } else {
            EXPECT_CASE(s == LEASEHOLD_OK || s == LEASEHOLD_LOST, "lease_restore");
        }
        if (s == LEASEHOLD_OK) {
            /* Detached: the original holder keeps the key. */
            leasehold_lease_detach(lease);
        } else {
            EXPECT_CASE(lease == sentinel, "lease_restore");
        }
    } else {
        s = leasehold_force_release(client, k.ptr, k.len);
        check_status(s, "force_release", n);
        EXPECT_CASE(k.valid ? s == LEASEHOLD_OK : s == LEASEHOLD_INVALID_ARGUMENT,
                    "force_release");
    }
}

static void fuzz_lease(uint64_t n) {
    unsigned slot = (unsigned)below(HELD);
    leasehold_lease *lease = chance(5) ? NULL : held[slot];
    leasehold_status s = LEASEHOLD_OK;
    switch (below(6)) {
    case 0: {
        uint64_t ttl = random_u64(TTL_MAX);
        s = leasehold_lease_extend(lease, ttl);
        check_status(s, "lease_extend", n);
        if (lease == NULL || ttl == 0 || ttl > TTL_MAX) {
            EXPECT_CASE(s == LEASEHOLD_INVALID_ARGUMENT, "lease_extend");
        }
        break;
    }
    case 1:
        s = leasehold_lease_release(lease);
        check_status(s, "lease_release", n);
        if (lease == NULL) {
            EXPECT_CASE(s == LEASEHOLD_INVALID_ARGUMENT, "lease_release");
        }
        break;
    case 2:
        (void)leasehold_lease_fence(lease);
        (void)leasehold_lease_remaining_ms(lease);
        {
            const char *token = leasehold_lease_token(lease);
            EXPECT_CASE(lease == NULL || (token != NULL && strlen(token) == 32), "lease_token");
        }
        break;
    case 3:
        s = leasehold_lease_keep_alive_status(lease);
        check_status(s, "keep_alive_status", n);
        s = leasehold_lease_check(lease, random_u64(UINT64_MAX));
        check_status(s, "lease_check", n);
        EXPECT_CASE(lease != NULL || s == LEASEHOLD_INVALID_ARGUMENT, "lease_check");
        break;
    case 4:
        if (lease != NULL) {
            leasehold_lease_free(lease);
            held[slot] = NULL;
        } else {
            leasehold_lease_free(NULL);
            leasehold_lease_detach(NULL);
        }
        break;
    default:
        s = leasehold_lease_release(lease);
        check_status(s, "lease_release", n);
        s = leasehold_lease_release(lease);
        check_status(s, "lease_release twice", n);
        EXPECT_CASE(s != LEASEHOLD_OK, "a second release is not OK");
        break;
    }
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    const char *seed_env = getenv("LEASEHOLD_FUZZ_SEED");
    const char *cases_env = getenv("LEASEHOLD_FUZZ_CASES");
    uint64_t seed = seed_env != NULL ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    uint64_t cases = cases_env != NULL ? strtoull(cases_env, NULL, 10) : 3000;
    printf("FUZZ_SEED %" PRIu64 " cases %" PRIu64 "\n", seed, cases);
    fflush(stdout);
    state = seed * 0x9E3779B97F4A7C15ull + 1;

    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    uint64_t counts[5] = {0};
    for (uint64_t n = 0; n < cases; n++) {
        unsigned pick = (unsigned)below(100);
        if (pick < 15) {
            fuzz_url(n);
            counts[0]++;
        } else if (pick < 20) {
            fuzz_raw_url(n);
            counts[1]++;
        } else if (pick < 60) {
            fuzz_acquire(client, n);
            counts[2]++;
        } else if (pick < 75) {
            fuzz_restore_and_force(client, n);
            counts[3]++;
        } else {
            fuzz_lease(n);
            counts[4]++;
        }
    }
    for (unsigned i = 0; i < HELD; i++) {
        leasehold_lease_free(held[i]);
    }
    (void)leasehold_client_stats_json(client);
    (void)leasehold_client_metrics(client);
    (void)leasehold_client_retries(client);
    (void)leasehold_client_stats_json(NULL);
    (void)leasehold_client_retries(NULL);
    (void)leasehold_client_metrics(NULL);
    leasehold_client_free(client);
    printf("FUZZ_DONE urls %" PRIu64 " raw_urls %" PRIu64 " acquires %" PRIu64
           " restore_force %" PRIu64 " lease_calls %" PRIu64 "\n",
           counts[0], counts[1], counts[2], counts[3], counts[4]);
    return 0;
}

/* underneath.h: what the keep-alive, stats and persistent tests need beyond check.h: removing a
 * lock behind the library's back (as an operator or a crashed store would), and reading counters
 * out of leasehold_client_stats_json. */
#ifndef LEASEHOLD_TEST_UNDERNEATH_H
#define LEASEHOLD_TEST_UNDERNEATH_H

#include "check.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A key the local backend shows verbatim in its record file name (`k-<key>-<sha256>.lock`: letters,
 * digits and '-' only, at most 40 bytes), unique to this process and call. */
static inline void plain_key(char *out, size_t size, const char *label) {
    static unsigned counter = 0;
    snprintf(out, size, "%s-%ld-%u", label, (long)getpid(), counter++);
    CHECK(strlen(out) <= 40);
}

/* Deletes every record file of `key` in the local backend's directory. */
static inline void delete_local(const char *dir, const char *key) {
    char start[64];
    snprintf(start, sizeof start, "k-%s-", key);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int deleted = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, start, strlen(start)) == 0 && len > 5 &&
            strcmp(e->d_name + len - 5, ".lock") == 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            CHECK(unlink(path) == 0);
            deleted++;
        }
    }
    closedir(d);
    CHECK(deleted == 1);
}

/* DEL of the lock key of `key` on the Redis at 127.0.0.1:port, in raw RESP. The name is
 * `leasehold:{<16 hex digits>}l:<key>` (the hex is the start of SHA-256("leasehold:" followed by key), the
 * Cluster hash tag: see crates/leasehold-redis/src/keys.rs). Rather than carry a SHA-256 here, a
 * server-side script finds the one key of exactly that shape (plain_key's keys hold no glob
 * characters) and deletes it; it answers the number deleted, or minus the number found when that
 * is not exactly one. */
static inline void delete_redis(int port, const char *key) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    static const char script[] = "local k = redis.call('KEYS', ARGV[1]) "
                                 "if #k ~= 1 then return -#k end "
                                 "return redis.call('DEL', k[1])";
    char pattern[128];
    snprintf(pattern, sizeof pattern, "leasehold:{????????????????}l:%s", key);
    char command[512];
    int n = snprintf(command, sizeof command,
                     "*4\r\n$4\r\nEVAL\r\n$%zu\r\n%s\r\n$1\r\n0\r\n$%zu\r\n%s\r\n",
                     strlen(script), script, strlen(pattern), pattern);
    CHECK(n > 0 && (size_t)n < sizeof command);
    CHECK(write(fd, command, (size_t)n) == n);
    char reply[64] = {0};
    size_t got = 0;
    while (got < 4 && strstr(reply, "\r\n") == NULL) {
        ssize_t r = read(fd, reply + got, sizeof reply - 1 - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    close(fd);
    CHECK(strncmp(reply, ":1\r\n", 4) == 0); /* exactly one key deleted: the lock was there */
}

/* Deletes the lock on `key` where LEASEHOLD_TEST_UNDERNEATH says: "dir:<path>" or "redis:<port>". */
static inline void delete_underneath(const char *key) {
    const char *where = env_or_die("LEASEHOLD_TEST_UNDERNEATH");
    if (strncmp(where, "dir:", 4) == 0) {
        delete_local(where + 4, key);
    } else if (strncmp(where, "redis:", 6) == 0) {
        delete_redis(atoi(where + 6), key);
    } else {
        CHECK(!"LEASEHOLD_TEST_UNDERNEATH is dir:<path> or redis:<port>");
    }
}

/* The counter `name` in a stats JSON object (top level, as leasehold_client_stats_json writes it). */
static inline unsigned long long stat_of(const char *json, const char *name) {
    char needle[96];
    snprintf(needle, sizeof needle, "\"%s\":", name);
    const char *at = strstr(json, needle);
    CHECK(at != NULL);
    return strtoull(at + strlen(needle), NULL, 10);
}

/* A copy of the client's stats JSON, checked to be an object; free() it. */
static inline char *stats_copy(const leasehold_client *client) {
    const char *json = leasehold_client_stats_json(client);
    CHECK(json != NULL);
    CHECK(json[0] == '{' && json[strlen(json) - 1] == '}');
    char *copy = malloc(strlen(json) + 1);
    CHECK(copy != NULL);
    strcpy(copy, json);
    return copy;
}

#endif

/* leasehold-example: takes a lock, prints its fence, works, releases.
 *
 *   ./leasehold-example [URL] [KEY]
 *
 * URL defaults to $LEASEHOLD_URL, then file:///tmp/leasehold; KEY to "report:2026-11-29". */
#include "leasehold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, leasehold_status status) {
    fprintf(stderr, "%s failed (status %d): %s\n", what, (int)status, leasehold_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : getenv("LEASEHOLD_URL");
    if (url == NULL || url[0] == '\0') {
        url = "file:///tmp/leasehold";
    }
    const char *key = argc > 2 ? argv[2] : "report:2026-11-29";

    leasehold_client *client = NULL;
    leasehold_status status = leasehold_client_open(url, &client);
    if (status != LEASEHOLD_OK) {
        return fail("leasehold_client_open", status);
    }

    /* Hold the key for at most 30 s; wait up to 5 s for it to become free. */
    leasehold_lease *lease = NULL;
    status = leasehold_acquire(client, key, strlen(key), 30000, 5000, &lease);
    if (status == LEASEHOLD_NOT_ACQUIRED) {
        fprintf(stderr, "%s is busy: %s\n", key, leasehold_last_error());
        leasehold_client_free(client);
        return 2;
    }
    if (status != LEASEHOLD_OK) {
        leasehold_client_free(client);
        return fail("leasehold_acquire", status);
    }

    /* Hand the fence to the store you protect, so it can reject a stale holder:
     * UPDATE reports SET ..., last_fence = :fence WHERE id = :id AND last_fence < :fence */
    printf("locked %s with fence %llu (token %s)\n", key,
           (unsigned long long)leasehold_lease_fence(lease), leasehold_lease_token(lease));

    /* The work. A long job extends the lease before it runs out. */
    printf("working, %lld ms left on the lease\n", (long long)leasehold_lease_remaining_ms(lease));
    status = leasehold_lease_extend(lease, 30000);
    if (status != LEASEHOLD_OK) {
        /* LEASEHOLD_LOST: someone else may hold the key now; stop writing. */
        fprintf(stderr, "extend: %s\n", leasehold_last_error());
    }

    status = leasehold_lease_release(lease);
    if (status != LEASEHOLD_OK) {
        fprintf(stderr, "release: %s\n", leasehold_last_error());
    } else {
        printf("released\n");
    }
    leasehold_lease_free(lease);
    leasehold_client_free(client);
    return status == LEASEHOLD_OK ? 0 : 1;
}

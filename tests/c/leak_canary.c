/* Leaks a lease and its client on purpose: the runner expects valgrind to catch it, which proves a
 * leaking call would fail the C tests. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, "canary", 6, 30000, &lease));
    client = NULL;
    lease = NULL;
    printf("leak_canary: leaked a client and a lease\n");
    return 0;
}

/* What a C user of the installed library writes: check the ABI at start, then lock, fence, release.
   Built by tests/packages/run.sh with `pkg-config --cflags --libs leasehold` and nothing else. */
#include <leasehold.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : "file:///tmp/leasehold-package-test";
    if (leasehold_abi_check(LEASEHOLD_ABI_VERSION) != LEASEHOLD_OK) {
        fprintf(stderr, "%s\n", leasehold_last_error());
        return 1;
    }
    leasehold_client *client = NULL;
    if (leasehold_client_open(url, &client) != LEASEHOLD_OK) {
        fprintf(stderr, "open: %s\n", leasehold_last_error());
        return 1;
    }
    leasehold_lease *lease = NULL;
    const char *key = "package-test";
    if (leasehold_acquire(client, key, strlen(key), 10000, 5000, &lease) != LEASEHOLD_OK) {
        fprintf(stderr, "acquire: %s\n", leasehold_last_error());
        return 1;
    }
    printf("version %s abi %u fence %llu\n", leasehold_version(), leasehold_abi_version(),
           (unsigned long long)leasehold_lease_fence(lease));
    if (leasehold_lease_release(lease) != LEASEHOLD_OK) {
        fprintf(stderr, "release: %s\n", leasehold_last_error());
        return 1;
    }
    leasehold_lease_free(lease);
    leasehold_client_free(client);
    return 0;
}

/* Any C file that includes leasehold.h must build with -std=c11 -Wall -Wextra -Werror -pedantic and
 * link with -lleasehold: this one names every type and function of the header once. */
#include "leasehold.h"

#include <stdio.h>

int main(void) {
    leasehold_client *client = NULL;
    leasehold_lease *lease = NULL;
    leasehold_status status = leasehold_client_open(NULL, &client);
    enum leasehold_status tagged = leasehold_try_acquire(client, "k", 1, 1000, &lease);
    status = leasehold_acquire(client, "k", 1, 1000, 0, &lease);
    status = leasehold_lease_release(lease);
    status = leasehold_lease_extend(lease, 1000);
    uint64_t fence = leasehold_lease_fence(lease);
    int64_t left = leasehold_lease_remaining_ms(lease);
    const char *token = leasehold_lease_token(lease);
    leasehold_lease_free(lease);
    leasehold_client_free(client);
    printf("%s %d %d %llu %lld %s %s\n", leasehold_version(), (int)status, (int)tagged,
           (unsigned long long)fence, (long long)left, token == NULL ? "(null)" : token,
           leasehold_last_error());
    return status == LEASEHOLD_INVALID_ARGUMENT ? 0 : 1;
}

/*
 * The C ABI of libleasehold in the subset of C that PHP's FFI parser reads:
 * no #include, no preprocessor. Keep in step with include/leasehold.h.
 */
typedef struct leasehold_client leasehold_client;
typedef struct leasehold_lease leasehold_lease;
typedef enum leasehold_status {
    LEASEHOLD_OK = 0,
    LEASEHOLD_NOT_ACQUIRED = 1,
    LEASEHOLD_LOST = 2,
    LEASEHOLD_UNAVAILABLE = 3,
    LEASEHOLD_INVALID_ARGUMENT = 4,
    LEASEHOLD_INTERNAL = 5,
    LEASEHOLD_INTERRUPTED = 6,
    LEASEHOLD_STALE_FENCE = 7,
    LEASEHOLD_INCOMPLETE_ATTEMPT = 8
} leasehold_status;
typedef enum leasehold_once_state {
    LEASEHOLD_ONCE_NONE = 0,
    LEASEHOLD_ONCE_STARTED = 1,
    LEASEHOLD_ONCE_DONE = 2
} leasehold_once_state;

const char *leasehold_version(void);
uint32_t leasehold_abi_version(void);
const char *leasehold_last_error(void);
leasehold_status leasehold_client_open(const char *url, leasehold_client **client_out);
void leasehold_client_free(leasehold_client *client);
leasehold_status leasehold_try_acquire(const leasehold_client *client, const char *key, size_t key_len,
                                       uint64_t ttl_ms, leasehold_lease **lease_out);
leasehold_status leasehold_acquire(const leasehold_client *client, const char *key, size_t key_len,
                                   uint64_t ttl_ms, uint64_t wait_ms, leasehold_lease **lease_out);
leasehold_status leasehold_lease_release(leasehold_lease *lease);
leasehold_status leasehold_lease_extend(leasehold_lease *lease, uint64_t ttl_ms);
uint64_t leasehold_lease_fence(const leasehold_lease *lease);
int64_t leasehold_lease_remaining_ms(const leasehold_lease *lease);
const char *leasehold_lease_token(const leasehold_lease *lease);
void leasehold_lease_free(leasehold_lease *lease);
leasehold_status leasehold_client_open_persistent(const char *url, leasehold_client **client_out);
leasehold_status leasehold_lease_keep_alive(leasehold_lease *lease, bool enabled);
leasehold_status leasehold_lease_keep_alive_status(const leasehold_lease *lease);
leasehold_status leasehold_lease_check(const leasehold_lease *lease, uint64_t margin_ms);
const char *leasehold_client_stats_json(const leasehold_client *client);
const char *leasehold_client_metrics(const leasehold_client *client);
leasehold_status leasehold_try_acquire_shared(const leasehold_client *client, const char *key, size_t key_len,
                                              uint64_t ttl_ms, leasehold_lease **lease_out);
leasehold_status leasehold_acquire_shared(const leasehold_client *client, const char *key, size_t key_len,
                                          uint64_t ttl_ms, uint64_t wait_ms, leasehold_lease **lease_out);
leasehold_status leasehold_try_acquire_permit(const leasehold_client *client, const char *key, size_t key_len,
                                              uint32_t permits, uint64_t ttl_ms, leasehold_lease **lease_out);
leasehold_status leasehold_acquire_permit(const leasehold_client *client, const char *key, size_t key_len,
                                          uint32_t permits, uint64_t ttl_ms, uint64_t wait_ms,
                                          leasehold_lease **lease_out);
leasehold_status leasehold_lease_restore(const leasehold_client *client, const char *key, size_t key_len,
                                         const char *token, leasehold_lease **lease_out);
leasehold_status leasehold_force_release(const leasehold_client *client, const char *key, size_t key_len);
void leasehold_lease_detach(leasehold_lease *lease);
leasehold_status leasehold_once_lock(const leasehold_client *client, const char *key, size_t key_len,
                                     uint64_t ttl_ms, uint64_t wait_ms, leasehold_lease **lease_out);
leasehold_status leasehold_once_read(leasehold_lease *lease, leasehold_once_state *state_out, uint64_t *fence_out,
                                     uint64_t *started_ms_out, const char **result_out, size_t *result_len_out);
leasehold_status leasehold_once_started(leasehold_lease *lease, uint64_t keep_for_ms);
leasehold_status leasehold_once_done(leasehold_lease *lease, const char *result, size_t result_len,
                                     uint64_t keep_for_ms);

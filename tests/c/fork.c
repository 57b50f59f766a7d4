/* A fork() child uses the client it inherited (through its own new connections), cannot release
 * or extend the parent's lease, and freeing that lease does not release the parent's lock. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

static int child(leasehold_client *client, leasehold_lease *inherited, const char *key,
                 uint64_t fence) {
    /* Local reads of the inherited lease still work. */
    CHECK(leasehold_lease_fence(inherited) == fence);
    CHECK(leasehold_lease_token(inherited) != NULL);

    /* It is the parent's lease: hands off. */
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_release(inherited));
    EXPECT_ERROR_MENTIONS("another process");
    EXPECT(LEASEHOLD_INVALID_ARGUMENT, leasehold_lease_extend(inherited, 30000));
    EXPECT_ERROR_MENTIONS("another process");

    /* The inherited client works, and sees the parent's lock. */
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(client, key, strlen(key), 1000, &lease));
    char other[160];
    snprintf(other, sizeof other, "%s:child", key);
    for (int i = 0; i < 3; i++) {
        EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, other, strlen(other), 30000, &lease));
        EXPECT(LEASEHOLD_OK, leasehold_lease_extend(lease, 30000));
        EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
        leasehold_lease_free(lease);
    }
    /* Freeing the parent's lease here must not release it. */
    leasehold_lease_free(inherited);
    leasehold_client_free(client);
    return 0;
}

static void run(const char *url, int free_client_first) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char key[128];
    unique_key(key, sizeof key, "fork");
    leasehold_lease *lease = NULL;
    /* Used before the fork, so the parent has live connections the child inherits. */
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 60000, &lease));
    uint64_t fence = leasehold_lease_fence(lease);
    fflush(NULL);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (free_client_first) {
            /* The child frees the client before the inherited lease: still nothing released. */
            leasehold_client *extra = client;
            leasehold_lease *probe = NULL;
            EXPECT(LEASEHOLD_NOT_ACQUIRED,
                   leasehold_try_acquire(extra, key, strlen(key), 1000, &probe));
            leasehold_client_free(extra);
            leasehold_lease_free(lease);
            exit(0);
        }
        exit(child(client, lease, key, fence));
    }
    /* A child that hangs (a backend that is not fork-safe) must fail the test, not stall it. */
    int status = 0;
    double deadline = now_seconds() + 180.0;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now_seconds() < deadline) {
        sleep_ms(20);
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "the fork() child did not finish within 180 s\n");
        exit(1);
    }
    CHECK(done == pid);
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the fork() child failed with exit status %d\n", WEXITSTATUS(status));
        exit(1);
    }

    /* The parent still holds its lock: nobody else can take it, and its own release works
     * (a release by the child would have made this Lost). */
    CHECK(leasehold_lease_remaining_ms(lease) > 0);
    leasehold_client *second = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &second));
    leasehold_lease *probe = NULL;
    EXPECT(LEASEHOLD_NOT_ACQUIRED, leasehold_try_acquire(second, key, strlen(key), 1000, &probe));
    EXPECT(LEASEHOLD_OK, leasehold_lease_extend(lease, 60000));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
    /* And the parent's client still works after the child went away. */
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 1000, &probe));
    CHECK(leasehold_lease_fence(probe) > fence);
    leasehold_lease_free(probe);
    leasehold_client_free(second);
    leasehold_client_free(client);
}

/* While a child that inherited the lease is still alive, the parent releases it and someone else
 * takes the key: the child's copy holds nothing. */
static void release_while_child_lives(const char *url) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    char key[128];
    unique_key(key, sizeof key, "fork-alive");
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 60000, &lease));
    uint64_t fence = leasehold_lease_fence(lease);
    int go[2];
    CHECK(pipe(go) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        char byte;
        /* Wait until the parent is done; EOF also ends the wait if the parent dies. */
        while (read(go[0], &byte, 1) < 0) {
        }
        close(go[0]);
        leasehold_lease_free(lease);
        leasehold_client_free(client);
        exit(0);
    }
    close(go[0]);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
    leasehold_client *other = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &other));
    leasehold_lease *next = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(other, key, strlen(key), 60000, &next));
    CHECK(leasehold_lease_fence(next) > fence);
    CHECK(write(go[1], "x", 1) == 1);
    close(go[1]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The child's exit released nothing of ours either. */
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(next));
    leasehold_lease_free(next);
    leasehold_client_free(other);
    leasehold_client_free(client);
}

struct first_call {
    leasehold_client *client;
    char key[160];
    leasehold_status status;
};

static void *take_and_release(void *arg) {
    struct first_call *call = arg;
    leasehold_lease *lease = NULL;
    call->status = leasehold_try_acquire(call->client, call->key, strlen(call->key), 30000, &lease);
    if (call->status == LEASEHOLD_OK) {
        call->status = leasehold_lease_release(lease);
        leasehold_lease_free(lease);
    }
    return NULL;
}

/* Threads of a fork() child making their first calls at once: each gets through on the child's own
 * client (made once they race to connect, none held up behind another's connect). */
static void threads_in_a_child(const char *url) {
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open(url, &client));
    leasehold_lease *warm = NULL;
    char key[128];
    unique_key(key, sizeof key, "fork-threads");
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 60000, &warm));
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        enum { N = 4 };
        struct first_call calls[N];
        pthread_t threads[N];
        for (int i = 0; i < N; i++) {
            calls[i].client = client;
            snprintf(calls[i].key, sizeof calls[i].key, "%s:%d", key, i);
            CHECK(pthread_create(&threads[i], NULL, take_and_release, &calls[i]) == 0);
        }
        for (int i = 0; i < N; i++) {
            CHECK(pthread_join(threads[i], NULL) == 0);
            CHECK(calls[i].status == LEASEHOLD_OK);
        }
        leasehold_lease_free(warm);
        leasehold_client_free(client);
        fflush(NULL);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(warm));
    leasehold_lease_free(warm);
    leasehold_client_free(client);
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    run(url, 0);
    run(url, 1);
    release_while_child_lives(url);
    threads_in_a_child(url);
    printf("fork: ok\n");
    return 0;
}

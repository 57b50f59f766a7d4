/* A fork() while another thread of the parent is inside leasehold_client_open_persistent (here: a
 * connect to a server that accepts and never answers, so the call lasts its whole I/O timeout) must
 * not leave the child waiting for that thread: the child's own calls, persistent opens included, go
 * through at once. The library's locks are per process, never inherited held. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *silent_url;

static void *open_silent(void *unused) {
    (void)unused;
    leasehold_client *client = NULL;
    /* The server never answers: UNAVAILABLE once the I/O timeout runs out. */
    EXPECT(LEASEHOLD_UNAVAILABLE, leasehold_client_open_persistent(silent_url, &client));
    return NULL;
}

static int child(const char *url) {
    /* Killed by SIGALRM if a lock the parent's thread held at the fork makes it wait. */
    alarm(30);
    leasehold_client *client = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_client_open_persistent(url, &client));
    char key[128];
    unique_key(key, sizeof key, "fork-during-open");
    leasehold_lease *lease = NULL;
    EXPECT(LEASEHOLD_OK, leasehold_try_acquire(client, key, strlen(key), 10000, &lease));
    EXPECT(LEASEHOLD_OK, leasehold_lease_release(lease));
    leasehold_lease_free(lease);
    leasehold_client_free(client);
    /* Ends by exec, not exit: what the parent's opening thread had allocated at the fork is only
     * referenced from that thread's stack, which the child does not have, and valgrind's leak check
     * at exit would count it as lost. exec replaces the image without a leak check. */
    fflush(NULL);
    execl("/bin/true", "true", (char *)NULL);
    return 1;
}

int main(void) {
    const char *url = env_or_die("LEASEHOLD_URL");
    silent_url = env_or_die("LEASEHOLD_SILENT_URL");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, open_silent, NULL) == 0);
    sleep_ms(500); /* the thread is inside the open now, waiting for the silent server */
    fflush(NULL);
    double started = now_seconds();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        _exit(child(url));
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the child %s after %.1f s (a lock held by the parent's thread at the fork?)\n",
                WIFSIGNALED(status) ? "was killed" : "failed", now_seconds() - started);
        return 1;
    }
    CHECK(pthread_join(thread, NULL) == 0);
    printf("fork_during_open: ok\n");
    return 0;
}

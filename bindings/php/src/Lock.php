<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\LockLostException;

/**
 * A lease on one key: exclusive ownership for a bounded time. Create it with Client::createLock().
 *
 * One Lock object holds at most one lease at a time. release() is safe in `finally`: on a lock this object does
 * not hold it does nothing. The destructor releases a held lease and never throws. A lease belongs to the process
 * that acquired it: in a child made by pcntl_fork() the inherited object holds nothing, and the child's exit does
 * not release the parent's lease.
 *
 * For work longer than the TTL, keepAlive() lets the library renew the lease in the background while PHP works.
 */
final class Lock implements LockInterface
{
    private ?\FFI\CData $lease = null;
    private int $ownerPid = 0;
    private bool $keepingAlive = false;
    /** The renewal failure of the lease this object holds or held last; kept after the lease is given up. */
    private ?LeaseholdException $keepAliveFailure = null;
    private bool $keepAliveLossLogged = false;
    /** A framework adapter hands the lease on: the end of the request detaches it instead of releasing it. */
    private bool $handedOn = false;
    /** The client's binding and PSR-3 events, read once here: every call below needs them. */
    private readonly \FFI $ffi;
    private readonly ?Events $events;

    /**
     * @internal use Client::createLock(), createSharedLock() or createSemaphore()
     *
     * @param bool $shared  a shared (read) lease instead of an exclusive one
     * @param int  $permits a permit of a semaphore of this many permits (0: not a semaphore)
     */
    public function __construct(
        private readonly Client $client,
        private readonly string $key,
        private readonly int $ttlMs,
        private readonly bool $shared = false,
        private readonly int $permits = 0,
        /** The lock of a once-key (`Client::once()`): taken with leasehold_once_lock. */
        private readonly bool $once = false,
    ) {
        $this->ffi = $client->library()->ffi();
        $this->events = $client->events();
    }

    /**
     * One attempt. True: this object now holds the lease. False: someone else holds the key.
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException this object already holds the lease, or the TTL is above the
     *                                            library's maximum
     */
    public function tryAcquire(): bool
    {
        $this->refuseIfHeld();
        $ffi = $this->ffi;
        $out = $this->client->library()->newLeaseOut();
        // The retry count and the clock only feed the events; without a logger they are not read.
        $retries = $this->events === null ? null : $this->retriesSoFar();
        $start = $this->events === null ? 0 : hrtime(true);
        $client = $this->client->handle();
        $length = strlen($this->key);
        $status = match (true) {
            $this->permits > 0 => $ffi->leasehold_try_acquire_permit(
                $client, $this->key, $length, $this->permits, $this->ttlMs, \FFI::addr($out)),
            $this->shared => $ffi->leasehold_try_acquire_shared(
                $client, $this->key, $length, $this->ttlMs, \FFI::addr($out)),
            default => $ffi->leasehold_try_acquire($client, $this->key, $length, $this->ttlMs, \FFI::addr($out)),
        };
        return $this->settle($status, $out, $start, $retries);
    }

    /**
     * Waits up to $wait seconds for the key. False when the wait ran out; never returns much later than $wait
     * plus one I/O timeout. Also false, within 100 ms, when SIGTERM or SIGINT arrives during the wait (a queue
     * worker told to stop): with `pcntl_async_signals(true)` the process's pcntl handlers run right after this
     * returns.
     *
     * @param int|float $wait seconds; 0 makes a single attempt
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException
     */
    public function acquire(mixed $wait = Client::DEFAULT_WAIT): bool
    {
        $waitMs = Seconds::toMillis($wait, 'wait');
        $this->refuseIfHeld();
        $ffi = $this->ffi;
        $out = $this->client->library()->newLeaseOut();
        $retries = $this->events === null ? null : $this->retriesSoFar();
        $start = $this->events === null ? 0 : hrtime(true);
        $client = $this->client->handle();
        $length = strlen($this->key);
        $status = match (true) {
            $this->once => $ffi->leasehold_once_lock($client, $this->key, $length, $this->ttlMs, $waitMs, \FFI::addr($out)),
            $this->permits > 0 => $ffi->leasehold_acquire_permit(
                $client, $this->key, $length, $this->permits, $this->ttlMs, $waitMs, \FFI::addr($out)),
            $this->shared => $ffi->leasehold_acquire_shared(
                $client, $this->key, $length, $this->ttlMs, $waitMs, \FFI::addr($out)),
            default => $ffi->leasehold_acquire($client, $this->key, $length, $this->ttlMs, $waitMs, \FFI::addr($out)),
        };
        return $this->settle($status, $out, $start, $retries);
    }

    /**
     * Gives the key back if this object holds it (compare-and-delete: never someone else's lease). Does nothing
     * when this object holds no lease.
     *
     * @throws LockLostException the lease had ended (expired or taken over); the current holder keeps the key
     * @throws Exception\BackendUnavailableException the backend did not answer; the lease is kept so that
     *                                               release() may be retried, and otherwise simply expires
     */
    public function release(): void
    {
        $lease = $this->lease;
        if ($lease === null) {
            return;
        }
        $ffi = $this->ffi;
        if ($this->events === null && !$this->keepingAlive) {
            // The common path: no logger, so neither the fence nor the time left is needed, and the library
            // checks itself that this process took the lease (getmypid() is a system call; here it is only
            // made when the library refused).
            $fence = 0;
            $remainingMs = 0;
            $status = $ffi->leasehold_lease_release($lease);
            if ($status === Library::OK) {
                $this->forget();
                return;
            }
            if ($status === Library::INVALID_ARGUMENT && !$this->holds()) {
                return; // inherited across pcntl_fork(): the parent's lease, which this process must not release
            }
        } else {
            if (!$this->holds()) {
                return;
            }
            $fence = $ffi->leasehold_lease_fence($lease);
            $remainingMs = $ffi->leasehold_lease_remaining_ms($lease);
            $status = $ffi->leasehold_lease_release($lease);
            if ($status === Library::OK) {
                $this->events?->released($this->key, $fence);
                $this->forget();
                return;
            }
        }
        $error = $this->client->library()->error($status, 'cannot release the lease');
        $this->report($status, $error, 'release', $fence, $remainingMs);
        // After Unavailable (or an internal error) the release may still run: the lease is over for its holder
        // (isAcquired() is false, extend() is refused), but the handle stays so a retry can free the key early.
        if ($status !== Library::UNAVAILABLE && $status !== Library::INTERNAL) {
            $this->forget();
        }
        throw $error;
    }

    /**
     * Makes the held lease end $ttl seconds from now (owner only).
     *
     * @param int|float|null $ttl seconds; null for this lock's TTL
     *
     * @throws LockLostException the lease had already ended; this object no longer holds it
     * @throws Exception\InvalidArgumentException this object holds no lease, or a bad $ttl
     * @throws Exception\BackendUnavailableException
     */
    public function extend(mixed $ttl = null): void
    {
        $ttlMs = $ttl === null ? $this->ttlMs : Seconds::toMillis($ttl, 'ttl');
        if ($ttlMs === 0) {
            throw new InvalidArgumentException('ttl must be positive, got 0 s');
        }
        if (!$this->holds()) {
            throw new InvalidArgumentException(sprintf(
                'cannot extend lock %s: this object does not hold it',
                Key::describe($this->key),
            ));
        }
        $ffi = $this->ffi;
        // Both only feed the events (which kind of loss to log).
        $fence = $this->events === null ? 0 : $ffi->leasehold_lease_fence($this->lease);
        $remainingMs = $this->events === null ? 0 : $ffi->leasehold_lease_remaining_ms($this->lease);
        $status = $ffi->leasehold_lease_extend($this->lease, $ttlMs);
        if ($status === Library::OK) {
            return;
        }
        $error = $this->client->library()->error($status, 'cannot extend the lease');
        $this->report($status, $error, 'extend', $fence, $remainingMs);
        if ($status === Library::LOST) {
            $this->forget();
        }
        throw $error;
    }

    /**
     * Turns background renewal of the held lease on (or off): for jobs longer than the TTL, which PHP cannot
     * interrupt to call extend(). A library thread (one per process, shared by all leases) extends the lease by
     * this lock's TTL every third of the TTL while PHP works. Renewal stops on release(), when this object is
     * destroyed, when turned off, and in a pcntl_fork() child (only the parent renews).
     *
     * A renewal that finds the lease lost is never silent: isAcquired() turns false and remainingLifetime() drops
     * to 0 or less at once, keepAliveError() returns the LockLostException, and the next release() or extend()
     * throws it. Check isAcquired() between steps of the work that must not run unprotected (no network call).
     *
     * @throws InvalidArgumentException this object holds no lease (never acquired, released, lost, or inherited
     *                                  across pcntl_fork()): the package's exception, like extend() on such a lock
     */
    public function keepAlive(bool $enabled = true): void
    {
        if (!$this->holds()) {
            throw new InvalidArgumentException(sprintf(
                'cannot keep lock %s alive: this object does not hold it',
                Key::describe($this->key),
            ));
        }
        $status = $this->ffi->leasehold_lease_keep_alive($this->lease, $enabled);
        if ($status !== Library::OK) {
            throw $this->client->library()->error($status, 'cannot switch keep-alive');
        }
        $this->keepingAlive = $enabled;
    }

    /**
     * Why background renewal failed, or null while it is fine (or was never turned on): a LockLostException once
     * a renewal found the lease lost (final; renewal has stopped), a BackendUnavailableException while renewals
     * fail and are retried (the lease may still be ours until remainingLifetime() runs out). Stays readable after
     * release() until the next acquisition. No network call. A loss is also logged (warning) once, when seen here,
     * by release() or by extend().
     */
    public function keepAliveError(): ?LeaseholdException
    {
        if ($this->holds() && $this->keepingAlive) {
            $this->readKeepAliveStatus();
        }
        return $this->keepAliveFailure;
    }

    /** Whether keepAlive() is on for the held lease. */
    public function keepsAlive(): bool
    {
        return $this->holds() && $this->keepingAlive;
    }

    /**
     * A long job's checkpoint between two steps: returns while this object holds its lease with at least $margin
     * seconds left; throws LockLostException when it holds none (never acquired, released, lost), when the latest
     * keep-alive renewal failed, or when less than $margin is left, so the job stops before the lease runs out
     * rather than after. No network call.
     */
    public function checkpoint(mixed $margin = 0.0): void
    {
        $marginMs = Seconds::toMillis($margin, 'margin');
        if (!$this->holds()) {
            throw new LockLostException(sprintf('lock %s is not held by this object', Key::describe($this->key)));
        }
        $status = $this->ffi->leasehold_lease_check($this->lease, $marginMs);
        if ($status !== Library::OK) {
            throw $this->client->library()->error($status, 'checkpoint');
        }
    }

    public function promote(mixed $wait = 0.0): bool
    {
        $waitMs = Seconds::toMillis($wait, 'wait');
        if (!$this->holds() || !$this->isShared()) {
            throw new InvalidArgumentException(sprintf(
                'cannot promote lock %s: this object holds no shared lease',
                Key::describe($this->key),
            ));
        }
        $status = $this->ffi->leasehold_lease_promote($this->lease, $waitMs);
        if ($status === Library::OK) {
            return true;
        }
        // Interrupted as an acquire's wait is (a signal, whose pcntl handler runs as this returns): still shared.
        if ($status === Library::NOT_ACQUIRED || $status === Library::INTERRUPTED) {
            return false;
        }
        $this->failSwap($status, 'promote');
    }

    public function demote(): void
    {
        if (!$this->holds() || $this->isShared() || $this->permits > 0) {
            throw new InvalidArgumentException(sprintf(
                'cannot demote lock %s: this object holds no exclusive lease',
                Key::describe($this->key),
            ));
        }
        $status = $this->ffi->leasehold_lease_demote($this->lease);
        if ($status === Library::OK) {
            return;
        }
        $this->failSwap($status, 'demote');
    }

    /** Local check, no network call: this object holds a lease whose conservative deadline has not passed. */
    public function isAcquired(): bool
    {
        return $this->holds()
            && $this->ffi->leasehold_lease_remaining_ms($this->lease) > 0;
    }

    /**
     * Seconds left on the held lease, measured on the monotonic clock minus a clock-drift allowance; 0 or less
     * once it has expired. Null when this object holds no lease. No network call.
     */
    public function remainingLifetime(): ?float
    {
        if (!$this->holds()) {
            return null;
        }
        return $this->ffi->leasehold_lease_remaining_ms($this->lease) / 1000.0;
    }

    /** The held lease's owner token (32 lowercase hex characters), or null. */
    public function token(): ?string
    {
        if (!$this->holds()) {
            return null;
        }
        $token = $this->ffi->leasehold_lease_token($this->lease);
        return $token === null ? null : (string) $token;
    }

    /**
     * The held lease's fencing token: it strictly increases with every acquisition of this key. Hand it to the
     * store you protect, which rejects writes carrying an older fence. Null when this object holds no lease.
     */
    public function fence(): ?int
    {
        if (!$this->holds()) {
            return null;
        }
        return $this->ffi->leasehold_lease_fence($this->lease);
    }

    public function key(): string
    {
        return $this->key;
    }

    /**
     * @internal for Client::once(): the once-key's record, as [state (Library::ONCE_*), fence, started at (ms since
     * the epoch), result bytes]
     * @return array{int, int, int, string}
     */
    public function onceRead(): array
    {
        $ffi = $this->ffi;
        $state = $ffi->new('leasehold_once_state');
        $fence = $ffi->new('uint64_t');
        $started = $ffi->new('uint64_t');
        $result = $ffi->new('const char*');
        $length = $ffi->new('size_t');
        $status = $ffi->leasehold_once_read($this->leaseOrThrow(), \FFI::addr($state), \FFI::addr($fence),
            \FFI::addr($started), \FFI::addr($result), \FFI::addr($length));
        if ($status !== Library::OK) {
            throw $this->client->library()->error($status, 'cannot read the once record');
        }
        $bytes = $length->cdata > 0 ? \FFI::string($result, $length->cdata) : '';
        return [(int) $state->cdata, (int) $fence->cdata, (int) $started->cdata, $bytes];
    }

    /** @internal for Client::once(): records that this attempt starts its action now */
    public function onceStarted(int $keepForMs): void
    {
        $status = $this->ffi->leasehold_once_started($this->leaseOrThrow(), $keepForMs);
        if ($status !== Library::OK) {
            throw $this->client->library()->error($status, 'cannot record the start of the action');
        }
    }

    /** @internal for Client::once(): records that the action is done, with its (serialized) result */
    public function onceDone(string $result, int $keepForMs): void
    {
        $status = $this->ffi->leasehold_once_done($this->leaseOrThrow(), $result, strlen($result), $keepForMs);
        if ($status !== Library::OK) {
            throw $this->client->library()->error($status, 'cannot record the result of the action');
        }
    }

    private function leaseOrThrow(): \FFI\CData
    {
        if (!$this->holds()) {
            throw new InvalidArgumentException(sprintf('lock %s is not held by this object', Key::describe($this->key)));
        }
        return $this->lease;
    }

    /**
     * While this object holds a lease: whether that lease is shared now (taken or restored as one, or demoted; not
     * once promoted). Otherwise: whether it is a shared (read) lock from Client::createSharedLock().
     */
    public function isShared(): bool
    {
        return $this->holds() ? (bool) $this->ffi->leasehold_lease_is_shared($this->lease) : $this->shared;
    }

    /** The semaphore's size for a permit from Client::createSemaphore(); null for a lock. */
    public function permits(): ?int
    {
        return $this->permits > 0 ? $this->permits : null;
    }

    /** The TTL in seconds that acquire() and extend() use. */
    public function ttl(): float
    {
        return $this->ttlMs / 1000.0;
    }

    public function __destruct()
    {
        if (!$this->holds()) {
            return;
        }
        try {
            $this->forget();
        } catch (\Throwable) {
            // A destructor must never throw; the lease expires on its own.
        }
    }

    /** A copy is a new, unacquired lock on the same key: two objects must never free one lease. */
    public function __clone()
    {
        $this->lease = null;
        $this->ownerPid = 0;
        $this->keepingAlive = false;
        $this->keepAliveFailure = null;
        $this->keepAliveLossLogged = false;
        $this->handedOn = false;
    }

    /**
     * Lets go of the held lease WITHOUT releasing it: the key stays held on the backend until its TTL (keep-alive
     * stops), and another process can pick it up with Client::restoreLock($key, $token). For framework adapters
     * whose locks outlive the object that took them. Does nothing when this object holds no lease.
     */
    public function detach(): void
    {
        if (!$this->holds()) {
            return;
        }
        $lease = $this->lease;
        $this->lease = null;
        $this->ownerPid = 0;
        $this->keepingAlive = false;
        RequestLeases::remove($this);
        $this->ffi->leasehold_lease_detach($lease);
    }

    /** @internal for Client::restoreLock(): this object now holds the restored lease */
    public function adopt(\FFI\CData $lease): void
    {
        $this->refuseIfHeld();
        $this->hold($lease);
    }

    /** This object now holds $lease, taken or restored in this process: fresh state, ended with the request. */
    private function hold(\FFI\CData $lease): void
    {
        $this->lease = $lease;
        $this->ownerPid = getmypid();
        $this->keepingAlive = false;
        $this->keepAliveFailure = null;
        $this->keepAliveLossLogged = false;
        $this->handedOn = false;
        RequestLeases::add($this, $this->ffi);
    }

    /**
     * @internal for the framework adapters, whose locks outlive the request that took them (Laravel's and
     * Symfony's rule): the end of the request (php-fpm's, or Client::endRequest()) detaches this lease instead of
     * releasing it, so its keep-alive stops and it lasts until its TTL.
     */
    public function handOn(): void
    {
        $this->handedOn = true;
    }

    /** @internal for RequestLeases: whether this lock came from $client */
    public function belongsTo(Client $client): bool
    {
        return $this->client === $client;
    }

    /**
     * @internal for RequestLeases: the request ended while this object held its lease. Released (a lease handed on:
     * detached); never throws, and never leaves the lease renewed.
     */
    public function endOfRequest(): void
    {
        if (!$this->holds()) {
            return;
        }
        if ($this->handedOn) {
            $this->detach();
            return;
        }
        try {
            $this->release();
        } catch (\Throwable) {
            // Lost already, or the backend did not answer: freeing the handle below ends the keep-alive either way.
        }
        if ($this->lease !== null) {
            try {
                $this->forget();
            } catch (\Throwable) {
                // The lease expires on its own.
            }
        }
    }

    private function holds(): bool
    {
        return $this->lease !== null && $this->ownerPid === getmypid();
    }

    private function refuseIfHeld(): void
    {
        if ($this->holds()) {
            throw new InvalidArgumentException(sprintf(
                'lock %s is already held by this object; release() or extend() it',
                Key::describe($this->key),
            ));
        }
    }

    /** A promote or demote that failed: a lost lease is given up, as after extend(). */
    private function failSwap(int $status, string $during): never
    {
        $error = $this->client->library()->error($status, "cannot $during the lease");
        $this->events?->backendError($during, $status, $error->getMessage(), $this->key);
        if ($status === Library::LOST) {
            $this->forget();
        }
        throw $error;
    }

    private function settle(int $status, \FFI\CData $out, int|float $start, ?int $retriesBefore): bool
    {
        $events = $this->events;
        if ($status === Library::OK) {
            $this->hold($out);
        } elseif ($status !== Library::NOT_ACQUIRED && $status !== Library::INTERRUPTED) {
            $error = $this->client->library()->error($status, 'cannot acquire the lock');
            $events?->backendError('acquire', $status, $error->getMessage(), $this->key);
            throw $error;
        }
        if ($events !== null) {
            $retries = $retriesBefore === null ? 0 : $this->retriesSoFar() - $retriesBefore;
            if ($retries > 0) {
                $events->retried($this->key, $retries);
            }
            if ($status === Library::OK) {
                $events->acquired($this->key, (int) $this->fence(), (hrtime(true) - $start) / 1e9);
            }
        }
        return $status === Library::OK;
    }

    /** The client's retry count, read only when someone listens for retry events (one plain call into the library). */
    private function retriesSoFar(): ?int
    {
        if ($this->events === null) {
            return null;
        }
        try {
            return $this->client->retriesSoFar();
        } catch (\Throwable) {
            return null;
        }
    }

    /** Logs a failed release or extend (after its exception was made, so the library's message is in it). */
    private function report(int $status, LeaseholdException $error, string $during, int $fence, int $remainingMs): void
    {
        $events = $this->events;
        if ($status === Library::LOST) {
            if ($this->keepingAlive) {
                $this->readKeepAliveStatus();
            }
            if ($this->keepAliveLossLogged) {
                return; // already reported when keep-alive found it
            }
            if ($this->keepAliveFailure instanceof LockLostException || $remainingMs > 0) {
                $events?->lost($this->key, $fence, $during, $error->getMessage());
            } else {
                $events?->expiredWhileHeld($this->key, $fence, $during, $error->getMessage());
            }
            $this->keepAliveLossLogged = true;
        } elseif ($status === Library::UNAVAILABLE || $status === Library::INTERNAL) {
            $events?->backendError($during, $status, $error->getMessage(), $this->key);
        }
    }

    /** Reads the renewal status of the held lease into keepAliveFailure, logging a loss the first time. */
    private function readKeepAliveStatus(): void
    {
        $library = $this->client->library();
        $status = $library->ffi()->leasehold_lease_keep_alive_status($this->lease);
        if ($status === Library::OK) {
            $this->keepAliveFailure = null;
            return;
        }
        $this->keepAliveFailure = $library->error($status, 'keep-alive renewal failed');
        if ($status === Library::LOST && !$this->keepAliveLossLogged) {
            $this->keepAliveLossLogged = true;
            $this->events?->lost(
                $this->key,
                (int) $library->ffi()->leasehold_lease_fence($this->lease),
                'keep-alive',
                $this->keepAliveFailure->getMessage(),
            );
        }
    }

    /** Frees the C lease (which releases it first if it is still held) and drops it from this object. */
    private function forget(): void
    {
        $lease = $this->lease;
        $this->lease = null;
        $this->ownerPid = 0;
        RequestLeases::remove($this);
        if ($lease !== null && !\FFI::isNull($lease)) {
            $this->ffi->leasehold_lease_free($lease);
        }
    }
}

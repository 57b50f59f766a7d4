<?php

declare(strict_types=1);

namespace Leasehold\Symfony;

use Leasehold\ClientInterface;
use Leasehold\Exception\InvalidArgumentException as LeaseholdInvalidArgument;
use Leasehold\Exception\LockLostException;
use Leasehold\LockInterface;
use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidArgumentException;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockAcquiringException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\NotSupportedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\SharedLockStoreInterface;
use Symfony\Component\Lock\Store\ExpiringStoreTrait;

/**
 * A Symfony Lock store over Leasehold: `new LockFactory(new LeaseholdStore($client))` and Symfony's own Lock
 * works unchanged, with fences, bounded native waits (no 100 ms polling) and any Leasehold backend.
 *
 * The lease's token and fence live in the Key's state, so a serialized Key (a lock taken when a message was
 * dispatched) is picked up in another process with Client::restoreLock(), in one round trip.
 *
 * A lease that is not deleted stays on the backend until its TTL ends, as with Symfony's RedisStore: neither
 * the end of this object nor the end of the process releases it (Symfony's Lock does, when autoRelease is on).
 * In a pcntl_fork() child, the leases the parent took through this store are the parent's: the child sees
 * them as not held and never releases them.
 *
 * Declares the return types of symfony/lock 6.x/7.x, which 5.4's untyped interfaces accept.
 */
final class LeaseholdStore implements
    PersistingStoreInterface,
    BlockingStoreInterface,
    SharedLockStoreInterface,
    BlockingSharedLockStoreInterface
{
    use ExpiringStoreTrait;

    /** Upper bound of the library's TTLs and waits. */
    private const MAX_SECONDS = 7 * 24 * 3600.0;

    /** @var array<string, array{lock: LockInterface, pid: int}> the leases taken or restored here, by token */
    private array $leases = [];

    private bool $canRestore = true;

    /**
     * @param ClientInterface $client a Leasehold\Client; in unit tests a Testing\InMemoryClient
     * @param float $initialTtl seconds a lease lasts after save() and waitAndSave(); Symfony's Lock then sets
     *                          its own TTL through putOffExpiration() (LockFactory's default: 300 s)
     * @param float $maxWait    seconds waitAndSave() waits at most (Symfony's blocking acquire has no timeout of
     *                          its own); then LockConflictedException
     */
    public function __construct(
        private readonly ClientInterface $client,
        private readonly float $initialTtl = 300.0,
        private readonly float $maxWait = 300.0,
    ) {
        if (!($initialTtl > 0.0) || $initialTtl > self::MAX_SECONDS) {
            throw new InvalidTtlException(sprintf(
                '%s() expects a TTL above 0 and at most %d s, got %s.',
                __METHOD__,
                self::MAX_SECONDS,
                var_export($initialTtl, true),
            ));
        }
        if (!($maxWait >= 0.0) || $maxWait > self::MAX_SECONDS) {
            throw new InvalidArgumentException(sprintf(
                '%s() expects a maximum wait from 0 to %d s, got %s.',
                __METHOD__,
                self::MAX_SECONDS,
                var_export($maxWait, true),
            ));
        }
    }

    public function save(Key $key): void
    {
        // Symfony's contract: the key's lifetime starts before the network call, so a slow call shortens it.
        $key->reduceLifetime($this->initialTtl);
        $this->prune();
        $lock = $this->lease($key);
        if ($lock !== null && self::isRead($key)) {
            $this->promote($key, $lock, 0.0);
            $this->settle($key, $lock);
            return;
        }
        if ($lock !== null) {
            // Saving a Key this store already holds refreshes it, as Symfony's stores do.
            try {
                $lock->extend($this->initialTtl);
            } catch (LockLostException) {
                $this->forget($key);
                $lock = null;
            }
        }
        if ($lock === null) {
            $lock = $this->client->createLock((string) $key, $this->initialTtl);
            if (!$lock->tryAcquire()) {
                $this->forget($key);
                throw new LockConflictedException(sprintf('The "%s" lock is held by someone else.', $key));
            }
            $this->hold($key, $lock);
        }
        $this->settle($key, $lock);
    }

    /** Waits natively (woken when the key is released, not polling) for at most $maxWait seconds. */
    public function waitAndSave(Key $key): void
    {
        $held = $this->lease($key);
        if ($held !== null && self::isRead($key)) {
            // Waits for the other readers to leave, new readers held back where the backend can.
            $this->promote($key, $held, $this->maxWait);
            $key->reduceLifetime($this->initialTtl);
            $this->settle($key, $held);
            return;
        }
        if ($held !== null) {
            $this->save($key);
            return;
        }
        $this->prune();
        $lock = $this->client->createLock((string) $key, $this->initialTtl);
        if (!$lock->acquire($this->maxWait)) {
            $this->forget($key);
            throw new LockConflictedException(sprintf(
                'The "%s" lock was still held by someone else after waiting %s s (the store\'s maxWait).',
                $key,
                $this->maxWait,
            ));
        }
        $this->hold($key, $lock);
        // The lease's life starts when it was taken, not when the wait began.
        $key->reduceLifetime($this->initialTtl);
        $this->settle($key, $lock);
    }

    /**
     * A shared (read) lease: any number of Keys may hold one on a resource at once, never beside a write lock; a
     * waiting writer goes before new readers. Saving a read Key again refreshes it.
     */
    public function saveRead(Key $key): void
    {
        $key->reduceLifetime($this->initialTtl);
        $this->prune();
        $lock = $this->readLease($key);
        if ($lock === null) {
            $lock = $this->client->createSharedLock((string) $key, $this->initialTtl);
            if (!$lock->tryAcquire()) {
                $this->forget($key);
                throw new LockConflictedException(sprintf('The "%s" lock is held for writing.', $key));
            }
            $this->hold($key, $lock);
        }
        $this->settle($key, $lock);
    }

    /** Waits natively for a read lease, at most $maxWait seconds. */
    public function waitAndSaveRead(Key $key): void
    {
        if ($this->lease($key) !== null) {
            $this->saveRead($key);
            return;
        }
        $this->prune();
        $lock = $this->client->createSharedLock((string) $key, $this->initialTtl);
        if (!$lock->acquire($this->maxWait)) {
            $this->forget($key);
            throw new LockConflictedException(sprintf(
                'The "%s" lock was still held for writing after waiting %s s (the store\'s maxWait).',
                $key,
                $this->maxWait,
            ));
        }
        $this->hold($key, $lock);
        $key->reduceLifetime($this->initialTtl);
        $this->settle($key, $lock);
    }

    /** The read lease this Key holds here, refreshed; null when it holds none. */
    private function readLease(Key $key): ?LockInterface
    {
        $lock = $this->lease($key);
        if ($lock === null) {
            return null;
        }
        try {
            if (!self::isRead($key)) {
                // Atomically, keeping the token: no writer can get in between.
                $lock->demote();
                $this->hold($key, $lock);
            }
            $lock->extend($this->initialTtl);
            return $lock;
        } catch (LockLostException) {
            $this->forget($key);
            return null;
        }
    }

    /**
     * @throws LockConflictedException the lease is no longer this Key's (expired, released, taken over, or never
     *                                 saved)
     */
    public function putOffExpiration(Key $key, float $ttl): void
    {
        $key->reduceLifetime($ttl);
        $lock = $this->lease($key);
        if ($lock === null) {
            $this->forget($key);
            throw new LockConflictedException(sprintf('The "%s" lock is not held by this key.', $key));
        }
        try {
            $lock->extend($ttl);
        } catch (LockLostException $lost) {
            $this->forget($key);
            throw new LockConflictedException(sprintf(
                'The "%s" lock was lost before its expiration could be put off: %s',
                $key,
                $lost->getMessage(),
            ), 0, $lost);
        }
        $this->settle($key, $lock);
    }

    /** Compare-and-delete: never removes someone else's lease. Silent for a Key that holds nothing. */
    public function delete(Key $key): void
    {
        $lock = $this->lease($key);
        if ($lock === null) {
            $this->forget($key);
            return;
        }
        try {
            $lock->release();
        } catch (LockLostException) {
            // Not ours any more: there is nothing of ours to delete.
        }
        // A BackendUnavailableException leaves the lease and the state in place, so a retry can release it.
        $this->forget($key);
    }

    /**
     * Whether this Key still holds its lease: one round trip confirms the token (so a release by another process
     * or an operator's forceRelease() is seen), none when the lease's conservative local deadline has passed (and
     * on PostgreSQL advisory, which cannot restore: there the local check answers).
     */
    public function exists(Key $key): bool
    {
        $state = self::state($key);
        if ($state === null) {
            return false;
        }
        $token = $state['token'];
        $entry = $this->leases[$token] ?? null;
        if ($entry === null || $entry['pid'] !== getmypid() || $entry['lock']->token() !== $token) {
            $lock = $this->lease($key); // from another process: restoring it is the check
            return $lock !== null && $lock->isAcquired();
        }
        if (!$entry['lock']->isAcquired()) {
            return false;
        }
        if (!$this->canRestore) {
            return true;
        }
        try {
            $probe = $this->client->restoreLock((string) $key, $token, $this->initialTtl);
        } catch (LockLostException) {
            unset($this->leases[$token]);
            return false;
        } catch (LeaseholdInvalidArgument) {
            // A backend without restore (PostgreSQL advisory: the session owns the lock, so it cannot be lost
            // without the connection): the local check is the answer.
            $this->canRestore = false;
            return true;
        }
        // The probe carries the backend's latest deadline: keep it, and let the older handle go without releasing.
        self::handOn($probe);
        $this->leases[$token] = ['lock' => $probe, 'pid' => getmypid()];
        self::detach($entry['lock']);
        return $probe->isAcquired();
    }

    /**
     * The fencing token of the lease $key holds (strictly increasing per resource): give it to the store you
     * protect, which rejects writes with an older one. Read from the Key's state, so it is there after the Key
     * crossed processes; null for a Key never saved here (or whose lease this store found lost).
     */
    public function fence(Key $key): ?int
    {
        $state = self::state($key);
        return $state === null ? null : $state['fence'];
    }

    public function __destruct()
    {
        $pid = getmypid();
        foreach ($this->leases as $entry) {
            if ($entry['pid'] === $pid) {
                self::detach($entry['lock']);
            }
        }
        $this->leases = [];
    }

    /**
     * The lease $key holds through this store: from this process's table, or restored from the Key's state when
     * the Key came from another process. Null when it holds none.
     */
    private function lease(Key $key): ?LockInterface
    {
        $state = self::state($key);
        if ($state === null) {
            return null;
        }
        $token = $state['token'];
        $entry = $this->leases[$token] ?? null;
        if ($entry !== null) {
            // token() is null unless the Lock holds its lease in this very process (it checks the pid itself), so
            // a match needs no getmypid() here: a system call, on every save, refresh and delete.
            if ($entry['lock']->token() === $token) {
                return $entry['lock'];
            }
            if ($entry['pid'] !== getmypid()) {
                return null; // inherited through fork(): the parent's lease, never the child's to touch
            }
            // Lost meanwhile, or detached when a request ended (ClientInterface::endRequest() in a long-running
            // worker): the token may still hold the key, so it is asked, as for a Key from another process.
            unset($this->leases[$token]);
        }
        try {
            $lock = $this->client->restoreLock((string) $key, $token, $this->initialTtl);
        } catch (LockLostException) {
            return null;
        }
        self::handOn($lock);
        $this->leases[$token] = ['lock' => $lock, 'pid' => getmypid()];
        return $lock;
    }

    /**
     * Symfony's locks outlive the request that took them (a Key crosses processes): the request's end detaches
     * such a lease rather than releasing it; Symfony's own Lock releases it when autoRelease says so.
     */
    private static function handOn(LockInterface $lock): void
    {
        if (method_exists($lock, 'handOn')) {
            $lock->handOn();
        }
    }

    private function hold(Key $key, LockInterface $lock): void
    {
        $token = (string) $lock->token();
        self::handOn($lock);
        $this->leases[$token] = ['lock' => $lock, 'pid' => getmypid()];
        $key->setState(self::class, [
            'token' => $token,
            'fence' => (int) $lock->fence(),
            'read' => $lock->isShared(),
        ]);
    }

    private function forget(Key $key): void
    {
        $state = self::state($key);
        if ($state !== null) {
            $entry = $this->leases[$state['token']] ?? null;
            // An inherited entry stays: the parent's bookkeeping is not the child's to change.
            if ($entry !== null && $entry['pid'] === getmypid() && $entry['lock']->token() === null) {
                unset($this->leases[$state['token']]);
            }
            $key->removeState(self::class);
        }
    }

    /** After the network call: the Key may not outlive the lease, and an expired one is Symfony's failure. */
    private function settle(Key $key, LockInterface $lock): void
    {
        $key->reduceLifetime(max(0.0, (float) $lock->remainingLifetime()));
        $this->checkNotExpired($key);
    }

    /**
     * Drops leases whose time ran out without a delete(), so that a long-running worker's table does not grow.
     * Freeing one makes a compare-and-delete that cannot touch a newer holder.
     */
    private function prune(): void
    {
        if (count($this->leases) < 64) {
            return;
        }
        $pid = getmypid();
        foreach ($this->leases as $token => $entry) {
            if ($entry['pid'] === $pid && !$entry['lock']->isAcquired()) {
                unset($this->leases[$token]);
            }
        }
    }

    private static function isRead(Key $key): bool
    {
        return (self::state($key)['read'] ?? false) === true;
    }

    /** @return array{token: string, fence: int, read?: bool}|null */
    private static function state(Key $key): ?array
    {
        if (!$key->hasState(self::class)) {
            return null;
        }
        $state = $key->getState(self::class);
        if (!is_array($state) || !is_string($state['token'] ?? null) || !is_int($state['fence'] ?? null)) {
            return null;
        }
        return $state;
    }

    /**
     * Leaves the lease on the backend until its TTL, as Symfony's network stores do, instead of the release
     * that Leasehold\Lock's destructor would make.
     */
    private static function detach(LockInterface $lock): void
    {
        if (method_exists($lock, 'detach')) {
            $lock->detach();
            return;
        }
        try {
            if ($lock->keepsAlive()) {
                $lock->keepAlive(false);
            }
        } catch (\Throwable) {
            // Best effort: the lease ends at its TTL either way.
        }
        // Lock has no detach() yet: clearing its handle leaves its destructor nothing to release. The library's
        // small handle is left allocated on purpose.
        (function (): void {
            $this->lease = null;
            $this->ownerPid = 0;
        })->call($lock);
    }

    /**
     * Symfony's promote (read → write) of a held Key: atomically and keeping the token, once no other reader is
     * left (waiting up to $wait seconds). A backend that cannot (Redlock) says so: NotSupportedException.
     *
     * @throws LockConflictedException other readers stayed, or the lease was lost
     */
    private function promote(Key $key, LockInterface $lock, float $wait): void
    {
        try {
            $promoted = $lock->promote($wait);
        } catch (LockLostException $lost) {
            $this->forget($key);
            throw new LockConflictedException(sprintf('The "%s" read lock was lost: %s', $key, $lost->getMessage()));
        } catch (LeaseholdInvalidArgument $refused) {
            throw self::notSupported($refused->getMessage());
        }
        if (!$promoted) {
            throw new LockConflictedException(sprintf('The "%s" lock is also held by other readers.', $key));
        }
        $this->hold($key, $lock);
    }

    private static function notSupported(string $message): \Exception
    {
        // NotSupportedException exists up to symfony/lock 5.4 (deprecated); 6.x removed it.
        // The @: loading the class triggers its deprecation notice.
        if (@class_exists(NotSupportedException::class)) {
            return new NotSupportedException($message);
        }
        return new LockAcquiringException($message);
    }
}

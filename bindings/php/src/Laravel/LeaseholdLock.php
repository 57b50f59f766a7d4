<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Cache\Lock as LaravelLock;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\LockInterface;

/**
 * Laravel's cache lock over a Leasehold lease: get(), block(), release(), owner(), forceRelease() as usual, plus
 * fence() and token(). block() waits natively — woken when the key is released, bounded by its seconds — instead
 * of Laravel's polling every 250 ms (betweenBlockedAttemptsSleepFor() has nothing to tune and is ignored).
 *
 * The lease lives in the store, not in this object: `Cache::lock('x', 10)->get()` keeps the lock after the
 * object is gone, as Laravel's own locks do, until release(), forceRelease() or its TTL.
 */
final class LeaseholdLock extends LaravelLock
{
    /** Laravel chose the owner (none was given): it becomes the lease's token at each acquisition. */
    private bool $ownerIsToken;

    /**
     * @param int|float   $seconds the lease's TTL; 0 (or less) for a lease kept alive while its request runs
     * @param string|null $owner   null: owner() is the lease's token once acquired
     */
    public function __construct(
        private readonly LeaseholdStore $store,
        string $name,
        mixed $seconds = 0,
        ?string $owner = null,
    ) {
        if (is_string($seconds) && is_numeric($seconds)) {
            $seconds = +$seconds; // Laravel passes config values through untouched
        }
        if (!is_int($seconds) && !is_float($seconds)) {
            throw new InvalidArgumentException('a lock\'s seconds must be a number, got ' . get_debug_type($seconds));
        }
        parent::__construct($name, $seconds, $owner);
        $this->ownerIsToken = $owner === null;
    }

    /** One attempt; true when this lock now holds the key. */
    public function acquire()
    {
        $lock = $this->newLease();
        if (!$lock->tryAcquire()) {
            return false;
        }
        $this->adopt($lock);
        return true;
    }

    /**
     * Waits up to $seconds for the key (natively; no polling), then runs $callback and releases, or returns true.
     *
     * @param int|float $seconds
     * @throws LockTimeoutException the key was held elsewhere for all of $seconds
     */
    public function block($seconds, $callback = null)
    {
        $lock = $this->newLease();
        if (is_string($seconds) && is_numeric($seconds)) {
            $seconds = +$seconds;
        }
        // Laravel's block() makes one attempt when the time is already up (0 or less seconds): so does this.
        if ((is_int($seconds) || is_float($seconds)) && $seconds < 0) {
            $seconds = 0;
        }
        if (!$lock->acquire($seconds)) {
            throw new LockTimeoutException(sprintf(
                'lock "%s" was held elsewhere for all of the %s s waited',
                $this->name,
                is_int($seconds) || is_float($seconds) ? $seconds : '?',
            ));
        }
        $this->adopt($lock);
        if (is_callable($callback)) {
            try {
                return $callback();
            } finally {
                $this->release();
            }
        }
        return true;
    }

    /**
     * Compare-and-delete: true when this owner's lease was released; false when it holds none (never acquired,
     * expired, taken over, released already), and then the current holder keeps the key.
     */
    public function release()
    {
        $lock = $this->store->held($this->name, $this->owner);
        if ($lock === null) {
            return false;
        }
        try {
            $lock->release();
        } catch (LockLostException) {
            $this->store->drop($this->name, $this->owner);
            return false;
        }
        $this->store->drop($this->name, $this->owner);
        return true;
    }

    /** Frees the key whoever holds it (counted and logged by the library; the holder's release() returns false). */
    public function forceRelease()
    {
        $this->store->forceRelease($this->name);
    }

    /** The fencing token of the held lease (strictly increasing per key), or null when this owner holds none. */
    public function fence(): ?int
    {
        return $this->store->held($this->name, $this->owner)?->fence();
    }

    /** The held lease's 32-hex token: what restoreLock() needs in another process. Null when none is held. */
    public function token(): ?string
    {
        return $this->store->held($this->name, $this->owner)?->token();
    }

    /** Seconds left on the held lease (local, conservative), or null when this owner holds none. */
    public function remainingLifetime(): ?float
    {
        return $this->store->held($this->name, $this->owner)?->remainingLifetime();
    }

    /**
     * Whether $owner holds this lock's key: this lock's owner or a token from another process (one round trip
     * confirms a token; Leasehold never reveals another holder's token).
     *
     * @param string $owner
     */
    public function isOwnedBy($owner)
    {
        return is_string($owner) && $owner !== '' && $this->store->held($this->name, $owner)?->isAcquired() === true;
    }

    /**
     * This lock's owner when it holds the key (Leasehold never reveals another holder's token), else ''. Local for
     * a lease taken in this process; one round trip for a token from elsewhere.
     */
    protected function getCurrentOwner()
    {
        $lock = $this->store->held($this->name, $this->owner);
        return $lock !== null && $lock->isAcquired() ? $this->owner : '';
    }

    private function newLease(): LockInterface
    {
        $seconds = $this->seconds > 0 ? $this->seconds : $this->store->keepAliveTtl();
        return $this->store->client()->createLock($this->name, $seconds);
    }

    private function adopt(LockInterface $lock): void
    {
        if ($this->seconds <= 0) {
            $lock->keepAlive();
        }
        if ($this->ownerIsToken) {
            $this->owner = (string) $lock->token();
        }
        $this->store->keep($this->name, $this->owner, $lock);
    }
}

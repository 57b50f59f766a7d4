<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Contracts\Cache\LockProvider;
use Illuminate\Contracts\Cache\Store;
use Leasehold\Client;
use Leasehold\Exception\LockLostException;
use Leasehold\Lock;

/**
 * A Laravel cache store whose only job is locks: `Cache::store('locks')->lock(...)`, `restoreLock()` and the
 * framework's UniqueLock accept it; every cache operation (get, put, increment, flush, …) throws a
 * \BadMethodCallException that says to keep cache items in another store.
 *
 * Owners. Laravel names a lock's owner with a string of its choosing (Str::random() when none is given); a
 * Leasehold lease has a 32-hex token chosen by the library. So:
 * - lock($name, $seconds) without an owner: once acquired, owner() IS the lease's token, and
 *   restoreLock($name, $owner) works in any process (one round trip confirms the token).
 * - lock($name, $seconds, $owner) with an owner of yours: owner() stays yours; this process maps it to the
 *   token, so restoreLock($name, $owner) works in the same process. In another process only the token is
 *   known to the backend: pass LeaseholdLock::token() (or omit the owner and pass owner()).
 *
 * Leases outlive the lock objects (Laravel code drops them right after get()), and the process: what is not
 * released stays on the backend until its TTL, as with Laravel's Redis locks. `$seconds = 0` (Laravel's "never
 * expires") is a lease of $keepAliveTtl seconds that the library renews every third of it while this process
 * runs (CLI script, queue worker, php-fpm request); it then ends at most $keepAliveTtl later, instead of
 * never.
 */
final class LeaseholdStore implements Store, LockProvider
{
    private const TOKEN = '/^[0-9a-f]{32}$/D';

    /** @var array<string, array<string, array{lock: Lock, pid: int}>> held leases by name, then owner */
    private array $leases = [];

    /**
     * @param float $keepAliveTtl seconds of the lease behind a lock of 0 seconds (renewed every third of it)
     */
    public function __construct(
        private readonly Client $client,
        private readonly float $keepAliveTtl = 60.0,
    ) {
        if (!($keepAliveTtl >= 0.003) || $keepAliveTtl > 7 * 24 * 3600.0) {
            throw new \InvalidArgumentException('keepalive_ttl must be from 0.003 s to 7 days, got ' . $keepAliveTtl);
        }
    }

    /**
     * @param string          $name
     * @param int|float       $seconds the lease's TTL; 0 for a lease kept alive while this process runs
     * @param string|null     $owner   null: owner() becomes the lease's token once acquired
     */
    public function lock($name, $seconds = 0, $owner = null): LeaseholdLock
    {
        return new LeaseholdLock($this, (string) $name, $seconds, $owner === null ? null : (string) $owner);
    }

    /**
     * A lock on $name for $owner, to release() (or check) a lock taken elsewhere: another process needs the
     * owner() read after acquiring (the lease's token).
     *
     * @param string $name
     * @param string $owner
     */
    public function restoreLock($name, $owner): LeaseholdLock
    {
        return $this->lock($name, 0, $owner);
    }

    public function client(): Client
    {
        return $this->client;
    }

    public function keepAliveTtl(): float
    {
        return $this->keepAliveTtl;
    }

    /** @internal for LeaseholdLock: the lease $owner holds on $name, restored when the owner is a token. */
    public function held(string $name, string $owner): ?Lock
    {
        $entry = $this->leases[$name][$owner] ?? null;
        if ($entry !== null) {
            // token() is null unless the Lock holds its lease in this very process (it checks the pid itself), so
            // a held lease needs no getmypid() here.
            if ($entry['lock']->token() !== null) {
                return $entry['lock'];
            }
            if ($entry['pid'] !== getmypid()) {
                return null; // inherited through fork(): the parent's lease
            }
            unset($this->leases[$name][$owner]);
        }
        if (preg_match(self::TOKEN, $owner) !== 1) {
            return null;
        }
        try {
            $lock = $this->client->restoreLock($name, $owner, $this->keepAliveTtl);
        } catch (LockLostException) {
            return null;
        }
        $this->keep($name, $owner, $lock);
        return $lock;
    }

    /** @internal for LeaseholdLock */
    public function keep(string $name, string $owner, Lock $lock): void
    {
        $this->prune();
        $this->leases[$name][$owner] = ['lock' => $lock, 'pid' => getmypid()];
    }

    /** @internal for LeaseholdLock: this process no longer tracks $owner's lease on $name */
    public function drop(string $name, string $owner): void
    {
        $entry = $this->leases[$name][$owner] ?? null;
        if ($entry !== null && $entry['pid'] === getmypid()) {
            unset($this->leases[$name][$owner]);
            if ($this->leases[$name] === []) {
                unset($this->leases[$name]);
            }
        }
    }

    /** @internal for LeaseholdLock::forceRelease() */
    public function forceRelease(string $name): void
    {
        $this->client->forceRelease($name);
        $pid = getmypid();
        foreach ($this->leases[$name] ?? [] as $owner => $entry) {
            if ($entry['pid'] === $pid) {
                // Freeing it makes a compare-and-delete that finds the lease gone and touches no newer holder.
                unset($this->leases[$name][$owner]);
            }
        }
        if (($this->leases[$name] ?? null) === []) {
            unset($this->leases[$name]);
        }
    }

    public function get($key)
    {
        throw self::noCache('get');
    }

    public function many(array $keys)
    {
        throw self::noCache('many');
    }

    public function put($key, $value, $seconds)
    {
        throw self::noCache('put');
    }

    public function putMany(array $values, $seconds)
    {
        throw self::noCache('putMany');
    }

    public function increment($key, $value = 1)
    {
        throw self::noCache('increment');
    }

    public function decrement($key, $value = 1)
    {
        throw self::noCache('decrement');
    }

    public function forever($key, $value)
    {
        throw self::noCache('forever');
    }

    public function forget($key)
    {
        throw self::noCache('forget');
    }

    public function flush()
    {
        throw self::noCache('flush');
    }

    /** Key namespaces come from the Leasehold URL (`prefix=`), so this is always empty. */
    public function getPrefix()
    {
        return '';
    }

    public function __destruct()
    {
        $pid = getmypid();
        foreach ($this->leases as $owners) {
            foreach ($owners as $entry) {
                if ($entry['pid'] === $pid) {
                    self::detach($entry['lock']);
                }
            }
        }
        $this->leases = [];
    }

    /** Drops leases whose time ran out without a release(), so that a queue worker's table does not grow. */
    private function prune(): void
    {
        if (count($this->leases) < 64) {
            return;
        }
        $pid = getmypid();
        foreach ($this->leases as $name => $owners) {
            foreach ($owners as $owner => $entry) {
                if ($entry['pid'] === $pid && !$entry['lock']->keepsAlive() && !$entry['lock']->isAcquired()) {
                    unset($this->leases[$name][$owner]);
                }
            }
            if ($this->leases[$name] === []) {
                unset($this->leases[$name]);
            }
        }
    }

    private static function noCache(string $operation): \BadMethodCallException
    {
        return new \BadMethodCallException(sprintf(
            'The leasehold cache store only provides locks (lock(), restoreLock()); %s() is not supported. '
            . 'Keep cache items in another store (redis, database, file).',
            $operation,
        ));
    }

    /**
     * Leaves the lease on the backend until its TTL, as Laravel's lock stores do, instead of the release that
     * Leasehold\Lock's destructor would make; a kept-alive lease stops being renewed.
     */
    private static function detach(Lock $lock): void
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
}

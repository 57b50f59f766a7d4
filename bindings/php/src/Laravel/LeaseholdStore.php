<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Contracts\Cache\LockProvider;
use Illuminate\Contracts\Cache\Store;
use Leasehold\ClientInterface;
use Leasehold\Exception\LockLostException;
use Leasehold\LockInterface;

/**
 * A Laravel cache store that takes every lock through Leasehold: `Cache::lock(...)`, `restoreLock()`, and so the
 * framework's own locking (WithoutOverlapping job middleware, ShouldBeUnique, the scheduler's
 * withoutOverlapping() and onOneServer() through LeaseholdEventMutex and LeaseholdSchedulingMutex).
 *
 * Cache items go to the cache store it wraps (`'store' => 'redis'` in its configuration): get, put, add,
 * increment, flush, tags… are that store's, unchanged, so this store can be the application's default. Without a
 * wrapped store every cache operation throws a \BadMethodCallException that says to keep items elsewhere.
 *
 * Lock names carry the prefix (`cache.prefix`, or the store's own 'prefix'), as Laravel's Redis locks do, so
 * two applications on one backend do not share locks.
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
 * expires") is a lease of $keepAliveTtl seconds that the library renews every third of it while the request that
 * took it runs (a php-fpm request, however it ends; a CLI script or queue worker until it exits or calls
 * ClientInterface::endRequest()); it then ends at most $keepAliveTtl later, instead of never.
 */
final class LeaseholdStore implements Store, LockProvider
{
    private const TOKEN = '/^[0-9a-f]{32}$/D';

    /**
     * @var array<string, array<string, array{lock: LockInterface, pid: int, token: ?string}>> held leases by name,
     *      then owner
     */
    private array $leases = [];

    /**
     * @param ClientInterface $client       a Leasehold\Client, or a Testing\InMemoryClient in tests
     * @param float           $keepAliveTtl seconds of the lease behind a lock of 0 seconds (renewed every third)
     * @param Store|null      $cacheStore   where cache items go; null: cache operations are refused
     * @param string          $prefix       put before every lock name
     */
    public function __construct(
        private readonly ClientInterface $client,
        private readonly float $keepAliveTtl = 60.0,
        private readonly ?Store $cacheStore = null,
        private readonly string $prefix = '',
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
        return new LeaseholdLock(
            $this,
            $this->prefix . $name,
            $seconds,
            $owner === null ? null : (string) $owner,
        );
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

    public function client(): ClientInterface
    {
        return $this->client;
    }

    /** The store cache items go to, or null when this store only provides locks. */
    public function cacheStore(): ?Store
    {
        return $this->cacheStore;
    }

    public function keepAliveTtl(): float
    {
        return $this->keepAliveTtl;
    }

    /** @internal for LeaseholdLock: the lease $owner holds on $name, restored when the owner is a token. */
    public function held(string $name, string $owner): ?LockInterface
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
            // Lost meanwhile, or detached when a request ended (ClientInterface::endRequest() in a long-running
            // worker): its token may still hold the key, so it is asked, for an owner of the application's too.
            unset($this->leases[$name][$owner]);
        }
        $token = preg_match(self::TOKEN, $owner) === 1 ? $owner : ($entry['token'] ?? null);
        if ($token === null) {
            return null;
        }
        try {
            $lock = $this->client->restoreLock($name, $token, $this->keepAliveTtl);
        } catch (LockLostException) {
            return null;
        }
        $this->keep($name, $owner, $lock);
        return $lock;
    }

    /** @internal for LeaseholdLock */
    public function keep(string $name, string $owner, LockInterface $lock): void
    {
        $this->prune();
        // Laravel's locks outlive the request that took them: its end detaches the lease rather than releasing it.
        if (method_exists($lock, 'handOn')) {
            $lock->handOn();
        }
        $this->leases[$name][$owner] = ['lock' => $lock, 'pid' => getmypid(), 'token' => $lock->token()];
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

    /**
     * Releases the leases this process holds on $name (already prefixed), whoever owns them: for the scheduler's
     * mutex, whose run ends where it began. False when it holds none.
     *
     * @internal for LeaseholdEventMutex
     */
    public function releaseHeld(string $name): bool
    {
        $released = false;
        foreach (array_keys($this->leases[$name] ?? []) as $owner) {
            $lock = $this->held($name, (string) $owner);
            if ($lock === null) {
                continue;
            }
            try {
                $lock->release();
                $released = true;
            } catch (LockLostException) {
                // Already ended: nothing of ours to release.
            }
            $this->drop($name, (string) $owner);
        }
        return $released;
    }

    public function get($key)
    {
        return $this->items('get')->get($key);
    }

    public function many(array $keys)
    {
        return $this->items('many')->many($keys);
    }

    public function put($key, $value, $seconds)
    {
        return $this->items('put')->put($key, $value, $seconds);
    }

    public function putMany(array $values, $seconds)
    {
        return $this->items('putMany')->putMany($values, $seconds);
    }

    /**
     * The wrapped store's own add() when it has one (atomic on Redis, Memcached, the database), else what
     * Laravel's Repository does for such stores.
     */
    public function add($key, $value, $seconds)
    {
        $store = $this->items('add');
        if (method_exists($store, 'add')) {
            return $store->add($key, $value, $seconds);
        }
        return $store->get($key) === null ? $store->put($key, $value, $seconds) : false;
    }

    public function increment($key, $value = 1)
    {
        return $this->items('increment')->increment($key, $value);
    }

    public function decrement($key, $value = 1)
    {
        return $this->items('decrement')->decrement($key, $value);
    }

    public function forever($key, $value)
    {
        return $this->items('forever')->forever($key, $value);
    }

    public function forget($key)
    {
        return $this->items('forget')->forget($key);
    }

    public function flush()
    {
        return $this->items('flush')->flush();
    }

    /**
     * The wrapped store's tagged cache (Redis, Memcached, array). Laravel's Repository only checks that this
     * method exists, so a wrapped store without tags answers here, as Laravel does for such stores.
     *
     * @param array<int, string>|mixed $names
     */
    public function tags($names)
    {
        $store = $this->items('tags');
        if (!method_exists($store, 'tags')) {
            throw new \BadMethodCallException('This cache store does not support tagging.');
        }
        return $store->tags(is_array($names) ? $names : func_get_args());
    }

    /** The prefix lock names carry (Laravel's `cache.prefix` by default); '' when none is configured. */
    public function getPrefix()
    {
        return $this->prefix;
    }

    /**
     * Other methods of the wrapped store (RedisStore::connection(), setPrefix() on its items…), which Laravel's
     * Repository forwards here.
     *
     * @param array<int, mixed> $arguments
     */
    public function __call(string $method, array $arguments): mixed
    {
        $store = $this->items($method);
        if (!method_exists($store, $method)) {
            throw new \BadMethodCallException(sprintf('Call to undefined method %s::%s()', $store::class, $method));
        }
        return $store->$method(...$arguments);
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

    /** The wrapped store, or the refusal that says how to configure one. */
    private function items(string $operation): Store
    {
        return $this->cacheStore ?? throw new \BadMethodCallException(sprintf(
            'The leasehold cache store only provides locks (lock(), restoreLock()); %s() is not supported. '
            . "Keep cache items in another store (redis, database, file), or name it as this store's 'store' "
            . 'to have it hold them.',
            $operation,
        ));
    }

    /**
     * Leaves the lease on the backend until its TTL, as Laravel's lock stores do, instead of the release that
     * Leasehold\Lock's destructor would make; a kept-alive lease stops being renewed.
     */
    private static function detach(LockInterface $lock): void
    {
        try {
            $lock->detach();
        } catch (\Throwable) {
            // Best effort, from a destructor: the lease ends at its TTL either way.
        }
    }
}

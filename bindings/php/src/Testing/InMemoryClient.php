<?php

declare(strict_types=1);

namespace Leasehold\Testing;

use Leasehold\Client;
use Leasehold\ClientInterface;
use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Exception\LockTimeoutException;
use Leasehold\Key;
use Leasehold\Once;
use Leasehold\Seconds;

/**
 * A Leasehold client in pure PHP, for unit tests of code that takes locks: no FFI, no library, no server. It keeps
 * Leasehold's semantics — 32-hex tokens unique per acquisition, fences that strictly increase per key, TTLs,
 * acquire() returning false while the key is held, LockLostException from release()/extend() after expiry or a
 * takeover, shared locks, semaphores, restoreLock(), forceRelease(), synchronized() — on a clock the test
 * controls:
 *
 *     $locks = new InMemoryClient();                   // a ManualClock: time moves only when told
 *     $service = new ReportBuilder($locks);            // your code takes a Leasehold\ClientInterface
 *     $service->build('2026-11-29');
 *     $locks->clock()->sleep(31.0);                    // the 30 s lease has now expired
 *
 * acquire($wait) on a held key moves a ManualClock forward to when the key frees (a lease expires) or the wait
 * ends, so waiting costs no real time. Clients made on one InMemoryBackend share leases, like processes on one
 * server: `new InMemoryClient($other->backend())`. State lives in this process only.
 */
final class InMemoryClient implements ClientInterface
{
    private readonly InMemoryBackend $backend;
    /** @var array<int, \WeakReference<InMemoryLock>> locks that acquired through this client, by object id */
    private array $locks = [];

    /** @param InMemoryBackend|null $backend shared leases and clock; null for a new one on a ManualClock */
    public function __construct(?InMemoryBackend $backend = null)
    {
        $this->backend = $backend ?? new InMemoryBackend();
    }

    /** The leases this client shares with every client made on the same backend. */
    public function backend(): InMemoryBackend
    {
        return $this->backend;
    }

    /** The clock leases expire by: `clock()->sleep(31.0)` lets 31 s pass (at once on a ManualClock). */
    public function clock(): Clock
    {
        return $this->backend->clock();
    }

    /** Whether anyone holds a lease on lock key $key now (exclusive or shared): for assertions in tests. */
    public function isLocked(string $key): bool
    {
        Key::check($key);
        return $this->backend->holders(InMemoryBackend::slot($key, false)) > 0;
    }

    public function createLock(string $key, mixed $ttl = Client::DEFAULT_TTL): InMemoryLock
    {
        Key::check($key);
        return new InMemoryLock($this->backend, $key, self::positiveTtl($ttl), client: $this);
    }

    public function createSharedLock(string $key, mixed $ttl = Client::DEFAULT_TTL): InMemoryLock
    {
        Key::check($key);
        return new InMemoryLock($this->backend, $key, self::positiveTtl($ttl), shared: true, client: $this);
    }

    public function createSemaphore(string $key, int $permits, mixed $ttl = Client::DEFAULT_TTL): InMemorySemaphore
    {
        Key::check($key);
        if ($permits < 1 || $permits > 65535) {
            throw new InvalidArgumentException(sprintf('permits must be 1 to 65535, got %d', $permits));
        }
        return new InMemorySemaphore($this->backend, $key, $permits, self::positiveTtl($ttl), $this);
    }

    public function restoreLock(string $key, string $token, mixed $ttl = Client::DEFAULT_TTL): InMemoryLock
    {
        Key::check($key);
        if (preg_match('/^[0-9a-f]{32}$/D', $token) !== 1) {
            throw new InvalidArgumentException('a lease token is 32 lowercase hexadecimal characters');
        }
        $lock = $this->createLock($key, $ttl);
        $lock->adopt($token);
        return $lock;
    }

    public function forceRelease(string $key): void
    {
        Key::check($key);
        $this->backend->forceRelease(InMemoryBackend::slot($key, false));
    }

    /**
     * @template T
     * @param callable(InMemoryLock): T $callback
     * @return T
     */
    public function synchronized(
        string $key,
        callable $callback,
        mixed $ttl = Client::DEFAULT_TTL,
        mixed $wait = Client::DEFAULT_WAIT,
    ): mixed {
        $lock = $this->createLock($key, $ttl);
        if (!$lock->acquire($wait)) {
            throw new LockTimeoutException(sprintf(
                'lock %s is held elsewhere; gave up after waiting %s s',
                Key::describe($key),
                is_int($wait) || is_float($wait) ? $wait : '?',
            ), 1);
        }
        try {
            $result = $callback($lock);
        } catch (\Throwable $failure) {
            try {
                $lock->release();
            } catch (\Throwable) {
                // The callback's exception is the one the caller must see.
            }
            throw $failure;
        }
        try {
            $lock->release();
        } catch (LockLostException | BackendUnavailableException $failure) {
            throw $failure->withCallbackResult($result);
        }
        return $result;
    }

    /** Client::once(), with its records in the backend's memory. */
    public function once(
        string $key,
        callable $fn,
        mixed $ttl = Client::DEFAULT_TTL,
        mixed $keepFor = 86400.0,
        ?callable $recover = null,
    ): mixed {
        Key::check($key);
        $keepMs = Seconds::toMillis($keepFor, 'keepFor');
        $lock = $this->createLock('once:' . $key, $ttl);
        if (!$lock->acquire($ttl)) {
            throw Once::timedOut($key, $ttl);
        }
        $backend = $this->backend;
        return Once::run(
            $lock,
            $key,
            static fn (): array => $backend->onceRecord($key),
            static function (int $state, string $result) use ($backend, $lock, $key, $keepMs): void {
                $lock->checkpoint();
                $backend->onceWrite($key, (int) $lock->fence(), $state, $result, $keepMs);
            },
            $fn,
            $recover,
        );
    }

    /**
     * As Client::endRequest(): every lease a lock of this client still holds is released; one handed on by a
     * framework adapter is detached (its keep-alive stops; it lasts until its TTL).
     */
    public function endRequest(): void
    {
        $locks = $this->locks;
        $this->locks = [];
        foreach ($locks as $reference) {
            $reference->get()?->endOfRequest();
        }
    }

    /** @internal for InMemoryLock: it now holds a lease that endRequest() must end */
    public function track(InMemoryLock $lock): void
    {
        if (count($this->locks) >= 1024) {
            $this->locks = array_filter($this->locks, static fn (\WeakReference $r): bool => $r->get()?->token() !== null);
        }
        $this->locks[spl_object_id($lock)] = \WeakReference::create($lock);
    }

    private static function positiveTtl(mixed $ttl): int
    {
        $ttlMs = Seconds::toMillis($ttl, 'ttl');
        if ($ttlMs === 0) {
            throw new InvalidArgumentException('ttl must be positive, got 0 s');
        }
        return $ttlMs;
    }
}

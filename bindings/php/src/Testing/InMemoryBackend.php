<?php

declare(strict_types=1);

namespace Leasehold\Testing;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Key;

/**
 * The leases and fences of InMemoryClient, in this PHP process: what a Redis or a lock directory holds for the
 * real client. Clients built on one backend see each other's leases, like two processes on one server; it
 * judges expiry by its Clock.
 *
 * Lock keys (exclusive and shared leases) and semaphore keys are separate namespaces, as in the library.
 *
 * @internal InMemoryClient and InMemoryLock call it; tests only construct it to share it or pick the clock
 */
final class InMemoryBackend
{
    /** The library's largest TTL and wait. */
    public const MAX_MILLIS = 7 * 24 * 3600 * 1000;

    public const EXCLUSIVE = 'exclusive';
    public const SHARED = 'shared';
    public const PERMIT = 'permit';

    /**
     * Live leases by slot (namespace + key), then token.
     *
     * @var array<string, array<string, array{kind: string, fence: int, deadline: float, ttl: float,
     *     renewedFrom: ?float}>>
     */
    private array $leases = [];

    /** @var array<string, int> the last fence handed out per slot: kept after the leases end, so fences only rise */
    private array $fences = [];

    /** @var array<string, array{fence: int, state: int, startedMs: int, result: string, until: float}> once records */
    private array $records = [];

    public function __construct(private readonly Clock $clock = new ManualClock())
    {
    }

    public function clock(): Clock
    {
        return $this->clock;
    }

    /**
     * The once record of $key, as `Lock::onceRead()` gives it: [state (Library::ONCE_*), fence, started at (ms
     * since the epoch), result].
     *
     * @return array{int, int, int, string}
     */
    public function onceRecord(string $key): array
    {
        $record = $this->records[$key] ?? null;
        if ($record === null || $record['until'] <= $this->clock->now()) {
            return [0, 0, 0, ''];
        }
        return [$record['state'], $record['fence'], $record['startedMs'], $record['result']];
    }

    /** Writes the once record of $key unless a newer fence wrote one (then the writer's lease is lost). */
    public function onceWrite(string $key, int $fence, int $state, string $result, int $keepMs): void
    {
        $current = $this->records[$key] ?? null;
        $now = $this->clock->now();
        if ($current !== null && $current['until'] > $now && $current['fence'] > $fence) {
            throw new LockLostException(sprintf('once-key %s: a newer holder (fence %d) recorded since',
                Key::describe($key), $current['fence']));
        }
        $this->records[$key] = ['fence' => $fence, 'state' => $state, 'startedMs' => (int) round(microtime(true) * 1000),
            'result' => $result, 'until' => $now + $keepMs / 1000];
    }

    /** The slot of a lock key or of a semaphore key: two namespaces. */
    public static function slot(string $key, bool $semaphore): string
    {
        return ($semaphore ? 'S' : 'L') . $key;
    }

    /**
     * Takes a lease on $slot, waiting up to $waitMs on the clock for it to free. Null when the wait ran out.
     *
     * @return array{token: string, fence: int, deadline: float}|null
     */
    public function acquire(string $slot, string $kind, int $permits, int $ttlMs, int $waitMs): ?array
    {
        self::checkMillis($ttlMs, 'ttl');
        self::checkMillis($waitMs, 'wait');
        return $this->waitFor($slot, $waitMs, function () use ($slot, $kind, $permits, $ttlMs): ?array {
            $now = $this->clock->now();
            $this->expire($slot, $now);
            if (!$this->isFreeFor($slot, $kind, $permits)) {
                return null;
            }
            $token = bin2hex(random_bytes(16));
            $fence = ($this->fences[$slot] ?? 0) + 1;
            $this->fences[$slot] = $fence;
            $ttl = $ttlMs / 1000.0;
            $this->leases[$slot][$token] = [
                'kind' => $kind, 'fence' => $fence, 'deadline' => $now + $ttl, 'ttl' => $ttl, 'renewedFrom' => null,
            ];
            return ['token' => $token, 'fence' => $fence, 'deadline' => $now + $ttl];
        });
    }

    /**
     * The double's one wait loop (acquire and promote): $attempt until it returns something other than null, or
     * until $waitMs have passed on the clock (then null). Nothing else runs while this PHP code waits, so $slot can
     * only free when a lease on it expires: between attempts it sleeps until the first one does (or the wait ends).
     *
     * @template T
     * @param callable(): (T|null) $attempt
     * @return T|null
     */
    public function waitFor(string $slot, int $waitMs, callable $attempt): mixed
    {
        $giveUpAt = $this->clock->now() + $waitMs / 1000.0;
        while (true) {
            $got = $attempt();
            $now = $this->clock->now();
            if ($got !== null || $now >= $giveUpAt) {
                return $got;
            }
            $sleepUntil = min($giveUpAt, $this->firstExpiry($slot) ?? $giveUpAt);
            $this->clock->sleep(max($sleepUntil - $now, 1e-6));
        }
    }

    /** Compare-and-delete. @throws LockLostException the token no longer holds the slot */
    public function release(string $slot, string $token): void
    {
        $this->expire($slot, $this->clock->now());
        if (!isset($this->leases[$slot][$token])) {
            throw self::lost($slot, 'release');
        }
        unset($this->leases[$slot][$token]);
        if ($this->leases[$slot] === []) {
            unset($this->leases[$slot]);
        }
    }

    /**
     * The lease now ends $ttlMs from now.
     *
     * @return float the new deadline
     * @throws LockLostException
     */
    public function extend(string $slot, string $token, int $ttlMs): float
    {
        self::checkMillis($ttlMs, 'ttl');
        $now = $this->clock->now();
        $this->expire($slot, $now);
        if (!isset($this->leases[$slot][$token])) {
            throw self::lost($slot, 'extend');
        }
        $lease = &$this->leases[$slot][$token];
        $lease['deadline'] = $now + $ttlMs / 1000.0;
        if ($lease['renewedFrom'] !== null) {
            $lease['renewedFrom'] = $now;
        }
        return $lease['deadline'];
    }

    /**
     * One attempt to turn a shared lease exclusive (or an exclusive one shared, with $toShared), keeping its token
     * and renewing its TTL. Null when other holders are left (promote only).
     *
     * @return array{fence: int, deadline: float}|null
     * @throws LockLostException
     */
    public function swapKind(string $slot, string $token, bool $toShared): ?array
    {
        $now = $this->clock->now();
        $this->expire($slot, $now);
        if (!isset($this->leases[$slot][$token])) {
            throw self::lost($slot, $toShared ? 'demote' : 'promote');
        }
        $lease = &$this->leases[$slot][$token];
        if (!$toShared) {
            if (count($this->leases[$slot]) > 1) {
                return null;
            }
            $this->fences[$slot] = ($this->fences[$slot] ?? 0) + 1;
            $lease['fence'] = $this->fences[$slot];
        }
        $lease['kind'] = $toShared ? self::SHARED : self::EXCLUSIVE;
        $lease['deadline'] = $now + $lease['ttl'];
        if ($lease['renewedFrom'] !== null) {
            $lease['renewedFrom'] = $now;
        }
        return ['fence' => $lease['fence'], 'deadline' => $lease['deadline']];
    }

    /**
     * The lease's deadline as renewals (keepAlive) have left it, or null when the token no longer holds the slot.
     */
    public function deadline(string $slot, string $token): ?float
    {
        $this->expire($slot, $this->clock->now());
        return isset($this->leases[$slot][$token]) ? $this->renewedDeadline($this->leases[$slot][$token]) : null;
    }

    /**
     * Turns background renewal on or off: while on, the lease is extended by its TTL every third of the TTL.
     *
     * @return float|null the deadline, or null when the lease is gone
     */
    public function keepAlive(string $slot, string $token, bool $enabled, float $ttl): ?float
    {
        $now = $this->clock->now();
        $this->expire($slot, $now);
        if (!isset($this->leases[$slot][$token])) {
            return null;
        }
        $lease = &$this->leases[$slot][$token];
        $lease['deadline'] = $this->renewedDeadline($lease);
        if ($enabled) {
            $lease['ttl'] = $ttl;
            $lease['renewedFrom'] = $now;
            $lease['deadline'] = $now + $ttl;
        } else {
            $lease['renewedFrom'] = null;
        }
        return $lease['deadline'];
    }

    /**
     * The exclusive lease $token holds on $slot, for restoreLock().
     *
     * @return array{fence: int, deadline: float}
     * @throws LockLostException
     */
    public function restore(string $slot, string $token): array
    {
        $this->expire($slot, $this->clock->now());
        $lease = $this->leases[$slot][$token] ?? null;
        if ($lease === null || $lease['kind'] !== self::EXCLUSIVE) {
            throw self::lost($slot, 'restore');
        }
        return ['fence' => $lease['fence'], 'deadline' => $this->renewedDeadline($lease)];
    }

    /** Ends every lease on $slot; fences keep rising across it. */
    public function forceRelease(string $slot): void
    {
        unset($this->leases[$slot]);
    }

    /** How many leases hold $slot now (for assertions in users' tests through InMemoryClient::isLocked()). */
    public function holders(string $slot): int
    {
        $this->expire($slot, $this->clock->now());
        return count($this->leases[$slot] ?? []);
    }

    private function isFreeFor(string $slot, string $kind, int $permits): bool
    {
        $leases = $this->leases[$slot] ?? [];
        return match ($kind) {
            self::EXCLUSIVE => $leases === [],
            self::SHARED => array_filter($leases, static fn (array $l) => $l['kind'] !== self::SHARED) === [],
            default => count($leases) < $permits,
        };
    }

    private function expire(string $slot, float $now): void
    {
        foreach ($this->leases[$slot] ?? [] as $token => $lease) {
            if ($this->renewedDeadline($lease) <= $now) {
                unset($this->leases[$slot][$token]);
            }
        }
        if (($this->leases[$slot] ?? null) === []) {
            unset($this->leases[$slot]);
        }
    }

    private function firstExpiry(string $slot): ?float
    {
        $first = null;
        foreach ($this->leases[$slot] ?? [] as $lease) {
            if ($lease['renewedFrom'] === null) {
                $first = $first === null ? $lease['deadline'] : min($first, $lease['deadline']);
            }
        }
        return $first;
    }

    /**
     * A kept-alive lease is renewed every third of its TTL: its deadline is the last renewal before now plus the
     * TTL. Computed when looked at instead of by a thread, which PHP has not got.
     *
     * @param array{kind: string, fence: int, deadline: float, ttl: float, renewedFrom: ?float} $lease
     */
    private function renewedDeadline(array $lease): float
    {
        if ($lease['renewedFrom'] === null) {
            return $lease['deadline'];
        }
        $every = $lease['ttl'] / 3.0;
        $renewals = floor(($this->clock->now() - $lease['renewedFrom']) / $every);
        return max($lease['deadline'], $lease['renewedFrom'] + $renewals * $every + $lease['ttl']);
    }

    private static function checkMillis(int $millis, string $name): void
    {
        if ($millis > self::MAX_MILLIS) {
            throw new InvalidArgumentException(sprintf(
                '%s is %d ms, above the maximum of %d ms (7 days)', $name, $millis, self::MAX_MILLIS));
        }
    }

    private static function lost(string $slot, string $during): LockLostException
    {
        return new LockLostException(sprintf(
            'cannot %s the lease on %s: it is not held by this token any more (expired, released or taken over)',
            $during,
            Key::describe(substr($slot, 1)),
        ), 2);
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Symfony;

use Leasehold\ClientInterface;
use Leasehold\Exception\InvalidArgumentException as LeaseholdInvalidArgument;
use Leasehold\Exception\LockLostException;
use Leasehold\LockInterface;
use Symfony\Component\Semaphore\Exception\InvalidArgumentException;
use Symfony\Component\Semaphore\Exception\SemaphoreAcquiringException;
use Symfony\Component\Semaphore\Exception\SemaphoreExpiredException;
use Symfony\Component\Semaphore\Key;
use Symfony\Component\Semaphore\PersistingStoreInterface;

/**
 * A Symfony Semaphore store over Leasehold's semaphores: `new SemaphoreFactory(new LeaseholdSemaphoreStore($client))`
 * and Symfony's own Semaphore works unchanged, on any Leasehold backend.
 *
 * A Key of limit L and weight W holds W of the L permits of the Leasehold semaphore named after its resource.
 * Leasehold takes one permit per call, so a weight above 1 is taken one permit at a time: when the semaphore
 * fills up part way, the permits already taken are given back and save() throws SemaphoreAcquiringException.
 * The limit is never exceeded, but two weighted saves racing for the last free permits can both be refused
 * when one of them would have fit, and while a weighted save is in progress its partial permits count against
 * the others. Everyone using a resource must give it the same limit (as with Symfony's RedisStore).
 *
 * The permits live in this store object, in this process: a Key is only held by the store (and process) that
 * saved it. Symfony's Semaphore cannot be serialized either, so this matches its use. A Key that is not deleted
 * keeps its permits until their TTL, even after this object or the process ends (as with RedisStore); Symfony's
 * Semaphore deletes on destruction when autoRelease is on. In a pcntl_fork() child, the parent's Keys are not
 * held and are never touched.
 *
 * Declares the return types of symfony/semaphore 7.x, which 5.4's untyped interface accepts.
 */
final class LeaseholdSemaphoreStore implements PersistingStoreInterface
{
    /** Upper bound of the library's TTLs. */
    private const MAX_SECONDS = 7 * 24 * 3600.0;

    /** @var array<string, array{permits: list<LockInterface>, pid: int}> the permits of each saved Key, by id */
    private array $held = [];

    /** @param ClientInterface $client a Leasehold\Client; in unit tests a Testing\InMemoryClient */
    public function __construct(private readonly ClientInterface $client)
    {
    }

    /**
     * Takes the Key's weight in permits for $ttlInSecond seconds; saving a Key already held here refreshes it.
     *
     * @throws SemaphoreAcquiringException the semaphore has fewer free permits than the Key's weight
     * @throws InvalidArgumentException    a TTL that is not above 0 (or above a week), a limit above 65535
     */
    public function save(Key $key, float $ttlInSecond): void
    {
        self::checkTtl($ttlInSecond);
        $this->prune();
        $permits = $this->permits($key);
        if ($permits !== null) {
            try {
                $this->extendAll($key, $permits, $ttlInSecond);
                return;
            } catch (SemaphoreExpiredException) {
                // Lost meanwhile: take the permits anew, as a first save would.
            }
        }

        try {
            $semaphore = $this->client->createSemaphore((string) $key, $key->getLimit(), $ttlInSecond);
        } catch (LeaseholdInvalidArgument $invalid) {
            throw new InvalidArgumentException($invalid->getMessage(), 0, $invalid);
        }
        $taken = [];
        try {
            for ($i = 0; $i < $key->getWeight(); $i++) {
                $permit = $semaphore->tryAcquire();
                if ($permit === null) {
                    break;
                }
                $taken[] = $permit;
            }
        } catch (\Throwable $failure) {
            self::giveBack($taken);
            throw $failure;
        }
        if (count($taken) < $key->getWeight()) {
            self::giveBack($taken);
            throw new SemaphoreAcquiringException($key, sprintf(
                'fewer than %d of its %d permits are free',
                $key->getWeight(),
                $key->getLimit(),
            ));
        }
        $lifetime = self::remaining($taken);
        if ($lifetime <= 0.0) {
            // The first permits ran out while the last were taken (a TTL shorter than the round trips).
            self::giveBack($taken);
            throw new SemaphoreAcquiringException($key, 'its permits expired while they were being taken');
        }
        $id = bin2hex(random_bytes(16));
        $this->held[$id] = ['permits' => $taken, 'pid' => getmypid()];
        $key->setState(self::class, $id);
        $key->reduceLifetime($lifetime);
    }

    /**
     * Gives the Key's permits back. Silent for a Key that holds nothing here. When the backend fails part way,
     * the permits not yet given back stay with the Key, so a retry gives them back.
     *
     * @throws \Leasehold\Exception\BackendUnavailableException
     */
    public function delete(Key $key): void
    {
        $id = self::id($key);
        $permits = $this->permits($key);
        if ($id === null || $permits === null) {
            $key->removeState(self::class);
            return;
        }
        while ($permits !== []) {
            try {
                $permits[0]->release();
            } catch (LockLostException) {
                // Expired or taken over: nothing of ours to give back.
            } catch (\Throwable $failure) {
                $this->held[$id]['permits'] = $permits;
                throw $failure;
            }
            array_shift($permits);
        }
        unset($this->held[$id]);
        $key->removeState(self::class);
    }

    /**
     * Whether the Key holds all its permits, judged locally on their conservative deadlines (no round trip):
     * Leasehold cannot pick up a permit by token, and a permit ends only by expiry, by this store's delete(),
     * or by an operator's forceRelease() (which the next putOffExpiration() reports).
     */
    public function exists(Key $key): bool
    {
        $permits = $this->permits($key);
        if ($permits === null) {
            return false;
        }
        foreach ($permits as $permit) {
            if (!$permit->isAcquired()) {
                return false;
            }
        }
        return true;
    }

    /**
     * Extends every permit of the Key to $ttlInSecond from now.
     *
     * @throws SemaphoreExpiredException the Key holds nothing here, or one of its permits was lost (the others
     *                                   are then given back)
     */
    public function putOffExpiration(Key $key, float $ttlInSecond): void
    {
        self::checkTtl($ttlInSecond);
        $permits = $this->permits($key);
        if ($permits === null) {
            throw new SemaphoreExpiredException($key, 'it is not held by this key');
        }
        $this->extendAll($key, $permits, $ttlInSecond);
    }

    /**
     * The fencing tokens of the permits the Key holds (each strictly increasing per resource), one per unit of
     * weight; empty for a Key that holds nothing here.
     *
     * @return list<int>
     */
    public function fences(Key $key): array
    {
        return array_map(static fn (LockInterface $permit): int => (int) $permit->fence(), $this->permits($key) ?? []);
    }

    /** Leaves the permits on the backend until their TTL, as Symfony's network stores do. */
    public function __destruct()
    {
        $pid = getmypid();
        foreach ($this->held as $entry) {
            if ($entry['pid'] === $pid) {
                foreach ($entry['permits'] as $permit) {
                    $permit->detach();
                }
            }
        }
        $this->held = [];
    }

    /** @param list<LockInterface> $permits */
    private function extendAll(Key $key, array $permits, float $ttl): void
    {
        foreach ($permits as $permit) {
            try {
                $permit->extend($ttl);
            } catch (LockLostException $lost) {
                // A Key holds all of its weight or nothing: the others go back too.
                self::giveBack($permits);
                $this->forget($key);
                throw new SemaphoreExpiredException($key, 'a permit was lost: ' . $lost->getMessage());
            }
        }
        $lifetime = self::remaining($permits);
        if ($lifetime <= 0.0) {
            self::giveBack($permits);
            $this->forget($key);
            throw new SemaphoreExpiredException($key, 'its permits ran out while they were being extended');
        }
        $key->reduceLifetime($lifetime);
    }

    /** The permits $key holds through this store in this process; null when it holds none. */
    private function permits(Key $key): ?array
    {
        $id = self::id($key);
        if ($id === null) {
            return null;
        }
        $entry = $this->held[$id] ?? null;
        if ($entry === null || $entry['pid'] !== getmypid()) {
            return null; // another store's Key, or inherited through fork(): the parent's permits
        }
        return $entry['permits'];
    }

    private function forget(Key $key): void
    {
        $id = self::id($key);
        if ($id !== null && ($this->held[$id]['pid'] ?? null) === getmypid()) {
            unset($this->held[$id]);
        }
        $key->removeState(self::class);
    }

    /** Drops Keys whose permits all ran out without a delete(), so that a long-running worker's table stays small. */
    private function prune(): void
    {
        if (count($this->held) < 64) {
            return;
        }
        $pid = getmypid();
        foreach ($this->held as $id => $entry) {
            if ($entry['pid'] !== $pid) {
                continue;
            }
            $alive = array_filter($entry['permits'], static fn (LockInterface $permit) => $permit->isAcquired());
            if ($alive === []) {
                unset($this->held[$id]);
            }
        }
    }

    private static function id(Key $key): ?string
    {
        if (!$key->hasState(self::class)) {
            return null;
        }
        $id = $key->getState(self::class);
        return is_string($id) ? $id : null;
    }

    /** @param list<LockInterface> $permits */
    private static function remaining(array $permits): float
    {
        $lifetime = INF;
        foreach ($permits as $permit) {
            $lifetime = min($lifetime, (float) $permit->remainingLifetime());
        }
        return $lifetime;
    }

    /**
     * Best effort: a permit that cannot be given back now comes back at its TTL.
     *
     * @param list<LockInterface> $permits
     */
    private static function giveBack(array $permits): void
    {
        foreach ($permits as $permit) {
            try {
                $permit->release();
            } catch (\Throwable) {
            }
        }
    }

    private static function checkTtl(float $ttl): void
    {
        // Symfony's RedisStore refuses only a negative TTL; a lease of 0 s would be over before it began.
        if (!($ttl > 0.0) || $ttl > self::MAX_SECONDS) {
            throw new InvalidArgumentException(sprintf(
                'The TTL should be above 0 and at most %d s, %s given.',
                self::MAX_SECONDS,
                var_export($ttl, true),
            ));
        }
    }
}

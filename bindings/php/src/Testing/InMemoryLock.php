<?php

declare(strict_types=1);

namespace Leasehold\Testing;

use Leasehold\Client;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\LockLostException;
use Leasehold\Key;
use Leasehold\LockInterface;
use Leasehold\Seconds;

/**
 * Leasehold\Lock's behaviour in memory: a lease from an InMemoryBackend, judged by its clock. Create it with
 * InMemoryClient::createLock(), createSharedLock() or createSemaphore().
 *
 * The same rules as the real lock: acquire() returns false when the key stays held; release() on a lease that
 * expired or was taken over throws LockLostException, and does nothing on a lock this object does not hold;
 * acquiring twice or extending a lock not held is an InvalidArgumentException; the destructor releases; a clone
 * holds nothing. isAcquired() and remainingLifetime() are local, as with the library: after forceRelease() by
 * someone else they still count down until the next release() or extend() finds the loss. No clock-drift
 * allowance is subtracted: the clock is exact.
 */
final class InMemoryLock implements LockInterface
{
    private ?string $token = null;
    private int $fence = 0;
    private float $deadline = 0.0;
    private bool $keepingAlive = false;
    private ?LeaseholdException $keepAliveFailure = null;
    /** Whether the held lease is shared now, after promote() or demote(); null: as this object was created. */
    private ?bool $sharedNow = null;
    /** A framework adapter hands the lease on: the end of the request detaches it instead of releasing it. */
    private bool $handedOn = false;

    /** @internal use InMemoryClient */
    public function __construct(
        private readonly InMemoryBackend $backend,
        private readonly string $key,
        private readonly int $ttlMs,
        private readonly bool $shared = false,
        private readonly int $permits = 0,
        /** Told of each acquisition, for its endRequest(). */
        private readonly ?InMemoryClient $client = null,
    ) {
    }

    public function tryAcquire(): bool
    {
        return $this->take(0);
    }

    public function acquire(mixed $wait = Client::DEFAULT_WAIT): bool
    {
        return $this->take(Seconds::toMillis($wait, 'wait'));
    }

    public function release(): void
    {
        $token = $this->token;
        if ($token === null) {
            return;
        }
        $this->forget();
        $this->backend->release($this->slot(), $token);
    }

    public function extend(mixed $ttl = null): void
    {
        $ttlMs = $ttl === null ? $this->ttlMs : Seconds::toMillis($ttl, 'ttl');
        if ($ttlMs === 0) {
            throw new InvalidArgumentException('ttl must be positive, got 0 s');
        }
        if ($this->token === null) {
            throw new InvalidArgumentException(sprintf(
                'cannot extend lock %s: this object does not hold it',
                Key::describe($this->key),
            ));
        }
        try {
            $this->deadline = $this->backend->extend($this->slot(), $this->token, $ttlMs);
        } catch (LockLostException $lost) {
            $this->forget();
            throw $lost;
        }
    }

    public function promote(mixed $wait = 0.0): bool
    {
        $waitMs = Seconds::toMillis($wait, 'wait');
        if ($this->token === null || !$this->isShared()) {
            throw new InvalidArgumentException(sprintf(
                'cannot promote lock %s: this object holds no shared lease',
                Key::describe($this->key),
            ));
        }
        // The other readers' leases must end first: the backend's wait loop sleeps until one expires.
        return $this->backend->waitFor($this->slot(), $waitMs, fn (): ?bool => $this->swap(false) ? true : null)
            ?? false;
    }

    public function demote(): void
    {
        if ($this->token === null || $this->isShared() || $this->permits > 0) {
            throw new InvalidArgumentException(sprintf(
                'cannot demote lock %s: this object holds no exclusive lease',
                Key::describe($this->key),
            ));
        }
        $this->swap(true);
    }

    private function swap(bool $toShared): bool
    {
        try {
            $lease = $this->backend->swapKind($this->slot(), (string) $this->token, $toShared);
        } catch (LockLostException $lost) {
            $this->forget();
            throw $lost;
        }
        if ($lease === null) {
            return false;
        }
        $this->fence = $lease['fence'];
        $this->deadline = $lease['deadline'];
        $this->sharedNow = $toShared;
        return true;
    }

    public function keepAlive(bool $enabled = true): void
    {
        if ($this->token === null) {
            throw new InvalidArgumentException(sprintf(
                'cannot keep lock %s alive: this object does not hold it',
                Key::describe($this->key),
            ));
        }
        $deadline = $this->backend->keepAlive($this->slot(), $this->token, $enabled, $this->ttl());
        if ($deadline === null) {
            $this->lostByKeepAlive();
        } else {
            $this->deadline = $deadline;
        }
        $this->keepingAlive = $enabled;
    }

    public function keepAliveError(): ?LeaseholdException
    {
        $this->observeRenewals();
        return $this->keepAliveFailure;
    }

    public function keepsAlive(): bool
    {
        return $this->token !== null && $this->keepingAlive;
    }

    public function checkpoint(mixed $margin = 0.0): void
    {
        $marginMs = Seconds::toMillis($margin, 'margin');
        if ($this->token === null) {
            throw new LockLostException(sprintf('lock %s is not held by this object', Key::describe($this->key)));
        }
        if ($this->keepAliveError() instanceof LeaseholdException) {
            throw new LockLostException('its keep-alive renewal failed: ' . $this->keepAliveFailure?->getMessage());
        }
        $left = $this->remainingLifetime() ?? 0.0;
        if ($left <= 0.0) {
            throw new LockLostException('the lease has run out');
        }
        if ($left * 1000.0 < $marginMs) {
            throw new LockLostException(sprintf(
                'only %d ms of the lease are left, less than the margin of %d ms',
                (int) ($left * 1000.0),
                $marginMs,
            ));
        }
    }

    public function isAcquired(): bool
    {
        $remaining = $this->remainingLifetime();
        return $remaining !== null && $remaining > 0.0;
    }

    public function remainingLifetime(): ?float
    {
        if ($this->token === null) {
            return null;
        }
        $this->observeRenewals();
        return $this->deadline - $this->backend->clock()->now();
    }

    public function token(): ?string
    {
        return $this->token;
    }

    public function fence(): ?int
    {
        return $this->token === null ? null : $this->fence;
    }

    public function key(): string
    {
        return $this->key;
    }

    public function isShared(): bool
    {
        return ($this->token !== null ? $this->sharedNow : null) ?? $this->shared;
    }

    public function permits(): ?int
    {
        return $this->permits > 0 ? $this->permits : null;
    }

    public function ttl(): float
    {
        return $this->ttlMs / 1000.0;
    }

    public function detach(): void
    {
        if ($this->token === null) {
            return;
        }
        if ($this->keepingAlive) {
            $this->backend->keepAlive($this->slot(), $this->token, false, $this->ttl());
        }
        $this->forget();
    }

    /** @internal for InMemoryClient::restoreLock(): this object now holds the lease $token holds */
    public function adopt(string $token): void
    {
        $this->refuseIfHeld();
        $lease = $this->backend->restore($this->slot(), $token);
        $this->token = $token;
        $this->fence = $lease['fence'];
        $this->deadline = $lease['deadline'];
        $this->keepingAlive = false;
        $this->keepAliveFailure = null;
        $this->handedOn = false;
        $this->client?->track($this);
    }

    /** @internal for the framework adapters, as Leasehold\Lock::handOn(): the end of the request detaches it */
    public function handOn(): void
    {
        $this->handedOn = true;
    }

    /** @internal for InMemoryClient::endRequest(), as Leasehold\Lock's: released, or detached when handed on */
    public function endOfRequest(): void
    {
        if ($this->token === null) {
            return;
        }
        if ($this->handedOn) {
            $this->detach();
            return;
        }
        try {
            $this->release();
        } catch (\Throwable) {
            $this->forget();
        }
    }

    public function __destruct()
    {
        try {
            $this->release();
        } catch (\Throwable) {
            // A destructor never throws, as the real lock's.
        }
    }

    /** A copy is a new, unacquired lock on the same key. */
    public function __clone()
    {
        $this->token = null;
        $this->keepingAlive = false;
        $this->keepAliveFailure = null;
        $this->handedOn = false;
    }

    private function take(int $waitMs): bool
    {
        $this->refuseIfHeld();
        $kind = match (true) {
            $this->permits > 0 => InMemoryBackend::PERMIT,
            $this->shared => InMemoryBackend::SHARED,
            default => InMemoryBackend::EXCLUSIVE,
        };
        $lease = $this->backend->acquire($this->slot(), $kind, $this->permits, $this->ttlMs, $waitMs);
        if ($lease === null) {
            return false;
        }
        $this->token = $lease['token'];
        $this->sharedNow = null;
        $this->fence = $lease['fence'];
        $this->deadline = $lease['deadline'];
        $this->keepingAlive = false;
        $this->keepAliveFailure = null;
        $this->handedOn = false;
        $this->client?->track($this);
        return true;
    }

    /** Brings the local deadline up to the renewals made since; a renewal that found the lease gone is a loss. */
    private function observeRenewals(): void
    {
        if ($this->token === null || !$this->keepingAlive) {
            return;
        }
        $deadline = $this->backend->deadline($this->slot(), $this->token);
        if ($deadline === null) {
            $this->lostByKeepAlive();
        } else {
            $this->deadline = $deadline;
        }
    }

    /**
     * The real keep-alive finds a loss at its next renewal and then reports it from keepAliveError(), release()
     * and extend(); here it is found when looked at.
     */
    private function lostByKeepAlive(): void
    {
        $this->keepAliveFailure = new LockLostException(sprintf(
            'keep-alive renewal failed: lock %s is not held by this lease any more',
            Key::describe($this->key),
        ), 2);
        $this->keepingAlive = false;
        $this->deadline = min($this->deadline, $this->backend->clock()->now());
    }

    private function refuseIfHeld(): void
    {
        if ($this->token !== null) {
            throw new InvalidArgumentException(sprintf(
                'lock %s is already held by this object; release() or extend() it',
                Key::describe($this->key),
            ));
        }
    }

    private function forget(): void
    {
        $this->token = null;
        $this->keepingAlive = false;
    }

    private function slot(): string
    {
        return InMemoryBackend::slot($this->key, $this->permits > 0);
    }
}

<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\IncompleteAttemptException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockTimeoutException;

/**
 * @internal the steps of `once()` (see Client::once()), shared by Client and Testing\InMemoryClient: they differ
 * only in where the record lives.
 */
final class Once
{
    /**
     * Runs the steps under $lock, which the caller acquired and this releases.
     *
     * @param callable(): array{int, int, int, string} $read  [state, fence, started at ms, recorded result]
     * @param callable(int, string): void              $write records state (Library::ONCE_STARTED / _DONE) and result
     */
    public static function run(
        LockInterface $lock,
        string $key,
        callable $read,
        callable $write,
        callable $fn,
        ?callable $recover,
    ): mixed {
        try {
            [$state, $fence, $startedMs, $recorded] = $read();
            if ($state === Library::ONCE_DONE) {
                $result = unserialize($recorded);
            } else {
                $rerun = true;
                if ($state === Library::ONCE_STARTED) {
                    $started = \DateTimeImmutable::createFromFormat('U.v', sprintf('%d.%03d',
                        intdiv($startedMs, 1000), $startedMs % 1000)) ?: new \DateTimeImmutable('@0');
                    $attempt = new IncompleteAttemptException($key, $fence, $started);
                    if ($recover === null) {
                        throw $attempt;
                    }
                    $decision = $recover($attempt, $lock);
                    if (!$decision instanceof Recovery) {
                        throw new InvalidArgumentException('$recover must return Recovery::done($result) or Recovery::rerun()');
                    }
                    if ($decision->isDone()) {
                        $result = $decision->result();
                        $write(Library::ONCE_DONE, serialize($result));
                        $rerun = false;
                    }
                }
                if ($rerun) {
                    $write(Library::ONCE_STARTED, '');
                    $lock->keepAlive();
                    $result = $fn($lock);
                    $write(Library::ONCE_DONE, serialize($result));
                }
            }
        } catch (\Throwable $failure) {
            try {
                $lock->release();
            } catch (\Throwable) {
                // The first failure is the one the caller must see; the key expires on its own.
            }
            throw $failure;
        }
        $lock->release();
        return $result;
    }

    /** The exception of a once-key held by a running attempt for all of the wait. */
    public static function timedOut(string $key, mixed $wait): LockTimeoutException
    {
        return new LockTimeoutException(sprintf(
            'once-key %s is held by a running attempt; gave up after waiting %s s',
            Key::describe($key),
            is_int($wait) || is_float($wait) ? $wait : '?',
        ), Library::NOT_ACQUIRED);
    }
}

<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * @internal The PSR-3 events of one Client: acquired and released (debug), lost and expired-while-held (warning),
 * backend errors (error), retries (debug). Only made when a logger was given, so the package never needs psr/log
 * otherwise.
 *
 * Context arrays hold the key (bounded and printable, see Key::describe()), the fence, timings and the library's
 * error message, which never contains a password; never the URL.
 */
final class Events
{
    /** @param \Psr\Log\LoggerInterface $logger */
    public function __construct(private readonly object $logger)
    {
    }

    public function acquired(string $key, int $fence, float $waited): void
    {
        $this->logger->debug('leasehold: lock {key} acquired, fence {fence}', [
            'event' => 'acquired', 'key' => Key::describe($key), 'fence' => $fence, 'waited' => $waited,
        ]);
    }

    public function released(string $key, int $fence): void
    {
        $this->logger->debug('leasehold: lock {key} released, fence {fence}', [
            'event' => 'released', 'key' => Key::describe($key), 'fence' => $fence,
        ]);
    }

    /** The lease was found not ours any more while its local lifetime had not run out (or keep-alive found it). */
    public function lost(string $key, int $fence, string $during, string $message): void
    {
        $this->logger->warning('leasehold: lock {key} was lost (found during {during})', [
            'event' => 'lost', 'key' => Key::describe($key), 'fence' => $fence, 'during' => $during,
            'error' => $message,
        ]);
    }

    /** A release or extend found the lease lost after its local lifetime had run out: work ran unprotected. */
    public function expiredWhileHeld(string $key, int $fence, string $during, string $message): void
    {
        $this->logger->warning('leasehold: lock {key} expired while held (found during {during})', [
            'event' => 'expired_while_held', 'key' => Key::describe($key), 'fence' => $fence, 'during' => $during,
            'error' => $message,
        ]);
    }

    public function backendError(string $during, int $status, string $message, ?string $key = null): void
    {
        $context = ['event' => 'backend_error', 'during' => $during, 'status' => $status, 'error' => $message];
        if ($key !== null) {
            $context['key'] = Key::describe($key);
        }
        $this->logger->error('leasehold: backend error during {during}: {error}', $context);
    }

    public function retried(string $key, int $retries): void
    {
        $this->logger->debug('leasehold: acquiring {key} took {retries} extra attempts', [
            'event' => 'retry', 'key' => Key::describe($key), 'retries' => $retries,
        ]);
    }
}

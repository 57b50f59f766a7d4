<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * @internal The leases the current request's Lock objects hold, so that the end of the request ends them however
 * the request ends.
 *
 * Destructors are not enough: after a fatal error (max_execution_time, memory_limit) PHP runs none, the php-fpm
 * worker lives on, and the library's keep-alive thread would renew a forgotten lease for as long as the worker
 * lives. Shutdown functions do run after a fatal error, so the first acquisition (and every connect) registers one
 * that releases what is still held — or, for a lease a framework adapter hands on, detaches it: its keep-alive
 * stops and it lasts until its TTL. Static properties start empty with every php-fpm request, which is what makes
 * this list the request's; a long-running worker (RoadRunner, FrankenPHP worker mode, Octane, a queue worker)
 * ends a request with Client::endRequest().
 */
final class RequestLeases
{
    /** @var array<int, \WeakReference<Lock>> the locks that hold a lease now, by object id */
    private static array $held = [];
    private static bool $registered = false;

    /**
     * Once per request (per process in the CLI and in long-running workers, whose statics live on): registers the
     * request's shutdown function, and stops the renewal of leases that earlier requests of this php-fpm worker
     * leaked — when another shutdown function ended such a request with exit() after a fatal error, neither
     * Leasehold's shutdown function nor any destructor ran. They then end within their TTL.
     */
    public static function watch(\FFI $ffi): void
    {
        if (!self::$registered) {
            self::$registered = true;
            register_shutdown_function([self::class, 'shutdown']);
            $ffi->leasehold_keep_alive_stop_all();
        }
    }

    public static function add(Lock $lock, \FFI $ffi): void
    {
        if (!self::$registered) {
            self::watch($ffi);
        }
        self::$held[spl_object_id($lock)] = \WeakReference::create($lock);
    }

    public static function remove(Lock $lock): void
    {
        unset(self::$held[spl_object_id($lock)]);
    }

    /** Ends the leases held by locks of $client (of every client: null): released, or detached when handed on. */
    public static function end(?Client $client = null): void
    {
        foreach (self::$held as $id => $reference) {
            $lock = $reference->get();
            if ($lock === null) {
                unset(self::$held[$id]);
                continue;
            }
            if ($client !== null && !$lock->belongsTo($client)) {
                continue;
            }
            unset(self::$held[$id]);
            $lock->endOfRequest();
        }
    }

    /** The request's shutdown function: runs after a return, exit(), an uncaught exception or a fatal error. */
    public static function shutdown(): void
    {
        if (self::$held === []) {
            return;
        }
        $error = error_get_last();
        if ($error !== null && str_starts_with((string) $error['message'], 'Allowed memory size')) {
            // The request died of memory_limit with its memory still in use: a little more lets the release run.
            @ini_set('memory_limit', (string) (memory_get_usage(true) + 16 * 1024 * 1024));
        }
        self::end();
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Illuminate\Support\ServiceProvider;

/**
 * Holds a booted artisan process until LEASEHOLD_START_FILE exists, so that workers and schedulers started one
 * after the other reach the queue or the schedule at the same moment, as on servers started together.
 */
final class StartGate extends ServiceProvider
{
    public function boot(): void
    {
        $file = getenv('LEASEHOLD_START_FILE');
        if (!is_string($file) || $file === '') {
            return;
        }
        $deadline = microtime(true) + 30.0;
        while (!file_exists($file) && microtime(true) < $deadline) {
            usleep(2_000);
        }
    }
}

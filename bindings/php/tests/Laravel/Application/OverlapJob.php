<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\Middleware\WithoutOverlapping;
use Leasehold\Tests\Support\LaravelApplication;

/** A queued job that must not run beside another for the same report (Laravel's WithoutOverlapping middleware). */
final class OverlapJob implements ShouldQueue
{
    use Dispatchable;
    use InteractsWithQueue;
    use Queueable;

    public const KEY = 'report';

    public int $tries = 3;

    public function __construct(public string $label)
    {
    }

    /** @return list<object> */
    public function middleware(): array
    {
        return [(new WithoutOverlapping(self::KEY))->releaseAfter(1)];
    }

    public function handle(): void
    {
        $start = microtime(true);
        Records::enter('job-' . $this->label . '-' . $this->attempts());
        $held = Records::heldInLeasehold(
            LaravelApplication::PREFIX . 'laravel-queue-overlap:' . self::class . ':' . self::KEY,
        );
        usleep(1_500_000);
        Records::append(['label' => $this->label, 'pid' => getmypid(), 'attempt' => $this->attempts(),
            'start' => $start, 'end' => microtime(true), 'lock_held_in_leasehold' => $held]);
    }
}

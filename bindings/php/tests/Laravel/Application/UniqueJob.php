<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeUnique;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** A queued job dispatched at most once until a worker has run it (Laravel's ShouldBeUnique). */
final class UniqueJob implements ShouldQueue, ShouldBeUnique
{
    use Dispatchable;
    use InteractsWithQueue;
    use Queueable;

    /** Seconds the unique lock lasts at most if no worker ever runs the job. */
    public int $uniqueFor = 60;

    public function __construct(public string $id)
    {
    }

    public function uniqueId(): string
    {
        return $this->id;
    }

    public function handle(): void
    {
        Records::append(['label' => 'unique-' . $this->id, 'pid' => getmypid()]);
    }
}

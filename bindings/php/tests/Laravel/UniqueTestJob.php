<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Illuminate\Contracts\Queue\ShouldBeUnique;

/** A queued job that must not be dispatched twice (Laravel's ShouldBeUnique). */
final class UniqueTestJob implements ShouldBeUnique
{
    public function __construct(private readonly string $id)
    {
    }

    public function uniqueId(): string
    {
        return $this->id;
    }
}

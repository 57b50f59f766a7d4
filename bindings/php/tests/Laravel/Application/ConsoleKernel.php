<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Foundation\Console\Kernel;

/** The test application's console kernel (app/Console/Kernel.php in a project): its command and its schedule. */
final class ConsoleKernel extends Kernel
{
    /** @var list<class-string> */
    protected $commands = [RecordCommand::class];

    /** Each scheduler process runs the events of the scenario named in LEASEHOLD_SCENARIO. */
    protected function schedule(Schedule $schedule): void
    {
        $scenario = static fn (string $name) => static fn () => getenv('LEASEHOLD_SCENARIO') === $name;
        $schedule->command('leasehold:record one-server --hold=0.5')->everyMinute()->onOneServer()
            ->when($scenario('one-server'));
        $schedule->command('leasehold:record overlap --hold=1.5')->everyMinute()->withoutOverlapping()
            ->when($scenario('overlap'));
    }
}

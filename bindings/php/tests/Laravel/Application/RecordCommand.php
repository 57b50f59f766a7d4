<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Illuminate\Console\Command;
use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Support\Facades\Date;
use Leasehold\Tests\Support\LaravelApplication;

/** The scheduled command: records its run and whether its scheduler mutex is a Leasehold lease, then works a while. */
final class RecordCommand extends Command
{
    /** @var string */
    protected $signature = 'leasehold:record {label} {--hold=0}';

    /** @var string */
    protected $description = 'Records a scheduled run (Leasehold tests)';

    public function handle(Schedule $schedule): int
    {
        $label = (string) $this->argument('label');
        $start = microtime(true);
        Records::enter($label);
        $mutexHeld = null;
        foreach ($schedule->events() as $event) {
            if (str_contains((string) $event->command, "leasehold:record $label ")) {
                // The mutex names Laravel uses, with the cache prefix the leasehold store puts on lock names.
                $name = LaravelApplication::PREFIX . $event->mutexName()
                    . ($event->onOneServer ? Date::now()->format('Hi') : '');
                $mutexHeld = Records::heldInLeasehold($name);
            }
        }
        usleep((int) ((float) $this->option('hold') * 1e6));
        Records::append(['label' => $label, 'pid' => getmypid(), 'start' => $start, 'end' => microtime(true),
            'mutex_held_in_leasehold' => $mutexHeld]);
        return 0;
    }
}

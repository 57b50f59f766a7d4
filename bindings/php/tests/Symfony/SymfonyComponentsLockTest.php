<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\TempDir;

/**
 * Symfony features that lock through LeaseholdStore, each in two real processes on Redis: Console's LockableTrait
 * (Debian's php-symfony-console) and a Messenger handler (php-symfony-messenger) consumed by Messenger's Worker.
 */
final class SymfonyComponentsLockTest extends LeaseholdTestCase
{
    public static function setUpBeforeClass(): void
    {
        Frameworks::symfonyConsoleAndMessenger();
    }

    public function testTwoProcessesRunningALockableCommandAtOnceRunItOnce(): void
    {
        $backend = Backend::redis();
        $dir = new TempDir('php-sf-command');
        $args = [$backend->url, $dir->path, self::uniqueKey('sf-command')];
        $runs = [Php::start(self::fixture('symfony-lockable-command.php'), $args),
            Php::start(self::fixture('symfony-lockable-command.php'), $args)];
        $outputs = [];
        foreach ($runs as $run) {
            $result = Php::finish($run, 60.0);
            self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
            $outputs[] = trim($result['stdout']);
        }
        sort($outputs);
        self::assertSame(['The command is already running in another process.', 'ran'], $outputs);
    }

    public function testTwoMessengerWorkersHandlingTheSameResourceNeverOverlap(): void
    {
        $backend = Backend::redis();
        $dir = new TempDir('php-sf-messenger');
        $resource = self::uniqueKey('sf-messenger');
        $script = self::fixture('symfony-messenger-worker.php');
        $runs = [
            'a' => Php::start($script, [$backend->url, $dir->path, $resource, 'a', 'b']),
            'b' => Php::start($script, [$backend->url, $dir->path, $resource, 'b', 'a']),
        ];
        $reports = [];
        foreach ($runs as $name => $run) {
            $result = Php::finish($run, 60.0);
            self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
            $reports[$name] = json_decode($result['stdout'], true, flags: JSON_THROW_ON_ERROR);
            self::assertSame(1, $reports[$name]['acknowledged'], "worker $name handled its message");
        }
        usort($reports, static fn (array $x, array $y) => $x['got'] <=> $y['got']);
        [$first, $second] = $reports;
        self::assertLessThan($first['released'], $second['asked'], 'the second asked while the first held it');
        self::assertGreaterThanOrEqual($first['released'], $second['got'], 'the handlers never overlapped');
    }
}

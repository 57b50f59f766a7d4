<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

use Leasehold\Client;

/**
 * The lock contract through the library against a real backend (each concrete class names its URL), plus what only
 * the library has.
 */
abstract class BackendLockTestCase extends LockContractTestCase
{
    abstract protected function url(): string;

    protected function client(): Client
    {
        return Client::connect($this->url());
    }

    public function testVersionIsReported(): void
    {
        self::assertMatchesRegularExpression('/^\d+\.\d+\.\d+/', $this->client()->version());
    }

    /** A client made before pcntl_fork() works in the child; the child's exit leaves the parent's lease alone. */
    public function testAClientWorksAfterFork(): void
    {
        $result = Php::run(self::fixture('fork.php'), [$this->url()], [], 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true);
        self::assertIsArray($report, $result['stdout'] . $result['stderr']);
        foreach ($report as $check => $passed) {
            self::assertTrue($passed, "fork check failed: $check\n" . $result['stdout'] . $result['stderr']);
        }
        self::assertGreaterThanOrEqual(6, count($report));
    }}

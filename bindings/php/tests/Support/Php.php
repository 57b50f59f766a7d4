<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/** Runs PHP scripts in child processes, the way workers really run: separate processes, separate clients. */
final class Php
{
    /**
     * Starts a script and returns its handle; pair with finish().
     *
     * @param list<string>          $args
     * @param array<string, string> $env  added to this process's environment
     * @param list<string>          $phpOptions options for the php binary itself (e.g. -d ffi.enable=0)
     * @return array{process: resource, pipes: array<int, resource>, started: float}
     */
    public static function start(string $script, array $args = [], array $env = [], array $phpOptions = []): array
    {
        $command = array_merge([PHP_BINARY], $phpOptions, [$script], $args);
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $pipes, null, array_merge(getenv(), $env));
        if ($process === false) {
            throw new \RuntimeException("cannot start $script");
        }
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        return ['process' => $process, 'pipes' => $pipes, 'started' => microtime(true)];
    }

    /**
     * Waits for a script started by start() (killing it after $timeout seconds).
     *
     * @return array{exit: int, stdout: string, stderr: string}
     */
    public static function finish(array $run, float $timeout = 120.0): array
    {
        $stdout = '';
        $stderr = '';
        $deadline = $run['started'] + $timeout;
        while (true) {
            $stdout .= (string) stream_get_contents($run['pipes'][1]);
            $stderr .= (string) stream_get_contents($run['pipes'][2]);
            $status = proc_get_status($run['process']);
            if (!$status['running']) {
                $stdout .= (string) stream_get_contents($run['pipes'][1]);
                $stderr .= (string) stream_get_contents($run['pipes'][2]);
                fclose($run['pipes'][1]);
                fclose($run['pipes'][2]);
                proc_close($run['process']);
                return ['exit' => $status['exitcode'], 'stdout' => $stdout, 'stderr' => $stderr];
            }
            if (microtime(true) > $deadline) {
                proc_terminate($run['process'], SIGKILL);
                proc_close($run['process']);
                return ['exit' => -1, 'stdout' => $stdout, 'stderr' => $stderr . "\n[killed after {$timeout}s]"];
            }
            $read = [$run['pipes'][1], $run['pipes'][2]];
            $write = $except = null;
            @stream_select($read, $write, $except, 0, 50_000);
        }
    }

    /**
     * @param list<string>          $args
     * @param array<string, string> $env
     * @param list<string>          $phpOptions
     * @return array{exit: int, stdout: string, stderr: string}
     */
    public static function run(
        string $script,
        array $args = [],
        array $env = [],
        float $timeout = 120.0,
        array $phpOptions = [],
    ): array {
        return self::finish(self::start($script, $args, $env, $phpOptions), $timeout);
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/** What every php-fpm test needs of the server itself: where its binary is, and how it is stopped. */
final class PhpFpm
{
    /** The php-fpm of this PHP (`PHP_FPM` overrides), never a skip. */
    public static function binary(): string
    {
        $candidates = array_filter([
            getenv('PHP_FPM') ?: null,
            '/usr/sbin/php-fpm' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION,
            '/usr/sbin/php-fpm',
            trim((string) shell_exec('command -v php-fpm' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION)),
            trim((string) shell_exec('command -v php-fpm')),
        ]);
        foreach ($candidates as $candidate) {
            if (is_file($candidate) && is_executable($candidate)) {
                return $candidate;
            }
        }
        throw new \RuntimeException('php-fpm is not installed (Debian: apt-get install php-fpm); '
            . 'the suite does not skip the php-fpm tests');
    }

    /**
     * Stops the master started with proc_open: SIGTERM (it stops its workers), SIGKILL if it is still there after
     * 10 s.
     *
     * @param resource $fpm
     */
    public static function stop($fpm): void
    {
        proc_terminate($fpm, SIGTERM);
        $deadline = microtime(true) + 10.0;
        while (proc_get_status($fpm)['running'] && microtime(true) < $deadline) {
            usleep(50_000);
        }
        if (proc_get_status($fpm)['running']) {
            proc_terminate($fpm, SIGKILL);
        }
        proc_close($fpm);
    }
}

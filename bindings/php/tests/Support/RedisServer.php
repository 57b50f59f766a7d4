<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * A redis-server of the suite's own on a free loopback port, without persistence, stopped when the object goes
 * away. A missing binary is an error, never a skip: the suite must really run against Redis.
 */
final class RedisServer
{
    private static ?self $shared = null;

    public readonly int $port;
    private TempDir $dir;
    /** @var resource|null */
    private $process = null;
    private int $pid = 0;
    private int $ownerPid;

    private function __construct()
    {
        $this->ownerPid = getmypid();
        $this->dir = new TempDir('redis');
        $this->port = self::spawn($this->dir, $this->process, $this->pid);
    }

    public static function start(): self
    {
        return new self();
    }

    /** One server for the tests that only need a working Redis; stopped when PHPUnit exits. */
    public static function shared(): self
    {
        return self::$shared ??= new self();
    }

    /** The Leasehold URL of this server, with extra query parameters. */
    public function url(array $query = []): string
    {
        $url = 'redis://127.0.0.1:' . $this->port;
        return $query === [] ? $url : $url . '?' . http_build_query($query);
    }

    /** SIGSTOP: the port still accepts connections (the kernel's backlog) but nothing answers. */
    public function pause(): void
    {
        posix_kill($this->pid, SIGSTOP);
    }

    public function resume(): void
    {
        posix_kill($this->pid, SIGCONT);
    }

    public function stop(): void
    {
        if ($this->process === null || getmypid() !== $this->ownerPid) {
            return;
        }
        posix_kill($this->pid, SIGCONT);
        posix_kill($this->pid, SIGKILL);
        proc_close($this->process);
        $this->process = null;
    }

    public function __destruct()
    {
        $this->stop();
    }

    /** @param resource|null $process */
    private static function spawn(TempDir $dir, &$process, int &$pid): int
    {
        $binary = trim((string) shell_exec('command -v redis-server'));
        if ($binary === '') {
            throw new \RuntimeException('redis-server is not installed (apt-get install redis-server); '
                . 'the suite does not skip the Redis tests');
        }
        for ($attempt = 0; $attempt < 5; $attempt++) {
            $port = Ports::free();
            // exec, so that the PID we signal is redis-server itself and not a shell.
            $command = sprintf(
                'exec %s --bind 127.0.0.1 --port %d --save "" --appendonly no --daemonize no '
                . '--maxmemory-policy noeviction --protected-mode no --dir %s --logfile %s',
                escapeshellarg($binary),
                $port,
                escapeshellarg($dir->path),
                escapeshellarg($dir->file('redis.log')),
            );
            $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'],
                2 => ['file', '/dev/null', 'w']], $pipes);
            if ($process === false) {
                throw new \RuntimeException('cannot start redis-server');
            }
            $pid = proc_get_status($process)['pid'];
            $deadline = microtime(true) + 10.0;
            while (microtime(true) < $deadline) {
                if (!proc_get_status($process)['running']) {
                    break;
                }
                if (Ports::answers($port)) {
                    return $port;
                }
                usleep(20_000);
            }
            posix_kill($pid, SIGKILL);
            proc_close($process);
            $process = null;
        }
        throw new \RuntimeException('redis-server did not start; see ' . $dir->file('redis.log'));
    }
}

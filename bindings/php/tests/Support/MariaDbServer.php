<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * A MariaDB of the suite's own, like crates/leasehold-testkit's `MariaDbServer`: `mariadb-install-db` into a private
 * directory (under /dev/shm when there is one, since DDL and commits sync files and the tests' timings should not
 * depend on a disk shared with other work), `mariadbd` on a free loopback port (never 3306, never the system
 * service), and an account with a password (so authentication is exercised) created by an init file. Stopped when
 * the object goes away or PHPUnit exits, and killed with PHPUnit if PHPUnit is killed. A missing MariaDB is an
 * error, never a skip: the suite must really run against MariaDB.
 */
final class MariaDbServer
{
    private const PREFIX = 'leasehold-php-mariadb-';
    public const USER = 'leasehold';
    public const PASSWORD = 'lh-php-test-pw';
    public const DATABASE = 'leasehold';

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
        $base = self::base();
        self::removeStaleDirs($base);
        $this->dir = new TempDir('mariadb', $base);
        $this->installDb();
        $this->port = $this->spawn();
        // Static properties are destroyed late and in no fixed order; stop the server explicitly at exit.
        register_shutdown_function([$this, 'stop']);
    }

    public static function start(): self
    {
        return new self();
    }

    /** One server for the tests that only need a working MariaDB; stopped when PHPUnit exits. */
    public static function shared(): self
    {
        return self::$shared ??= new self();
    }

    /** `mysql://leasehold:…@127.0.0.1:PORT/leasehold?lock=$lock`, with extra query parameters. */
    public function url(string $lock, array $query = []): string
    {
        return 'mysql://' . self::USER . ':' . self::PASSWORD . '@127.0.0.1:' . $this->port . '/' . self::DATABASE
            . '?' . http_build_query(['lock' => $lock] + $query);
    }

    /**
     * Deletes table mode's row for $key (default table and prefix) behind the library's back, as an operator's
     * DELETE would; exactly one row must go.
     */
    public function deleteLock(string $key): void
    {
        $sql = sprintf(
            "DELETE FROM leasehold_locks WHERE k = UNHEX(SHA2(CONCAT('leasehold:', %s), 256)); SELECT ROW_COUNT();",
            self::literal($key),
        );
        $out = $this->sql($sql);
        if ($out !== '1') {
            throw new \RuntimeException("deleting the row of $key answered " . var_export($out, true)
                . ', expected 1 row');
        }
    }

    /** Runs SQL with the `mariadb` client as the test account; returns its trimmed output (tab-separated rows). */
    public function sql(string $sql): string
    {
        $command = sprintf(
            '%s --no-defaults --protocol=TCP -h 127.0.0.1 -P %d -u %s -N -B %s -e %s 2>&1',
            escapeshellarg(self::tool('mariadb')),
            $this->port,
            escapeshellarg(self::USER),
            escapeshellarg(self::DATABASE),
            escapeshellarg($sql),
        );
        // The password goes through the environment, never onto a command line others can read.
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w']], $pipes, null,
            ['MYSQL_PWD' => self::PASSWORD, 'PATH' => (string) getenv('PATH')]);
        if ($process === false) {
            throw new \RuntimeException('cannot run the mariadb client');
        }
        $out = trim((string) stream_get_contents($pipes[1]));
        fclose($pipes[1]);
        $exit = proc_close($process);
        if ($exit !== 0) {
            throw new \RuntimeException("the mariadb client failed ($exit): $out");
        }
        return $out;
    }

    public function stop(): void
    {
        if ($this->process === null || getmypid() !== $this->ownerPid) {
            return;
        }
        // Nothing to keep: SIGKILL (SIGCONT first in case a test paused it).
        posix_kill($this->pid, SIGCONT);
        posix_kill($this->pid, SIGKILL);
        proc_close($this->process);
        $this->process = null;
    }

    public function __destruct()
    {
        $this->stop();
    }

    private function installDb(): void
    {
        $command = sprintf(
            '%s --no-defaults --datadir=%s %s --auth-root-authentication-method=normal --skip-test-db '
            . '--skip-name-resolve',
            escapeshellarg(self::tool('mariadb-install-db')),
            escapeshellarg($this->dir->file('data')),
            self::userArg(),
        );
        exec($command . ' 2>&1 >/dev/null', $lines, $exit);
        if ($exit !== 0) {
            throw new \RuntimeException("mariadb-install-db failed ($exit): " . implode("\n", $lines)
                . ' (Debian: apt-get install mariadb-server; the suite does not skip the MySQL tests)');
        }
        $init = sprintf(
            "CREATE DATABASE IF NOT EXISTS %s;\n"
            . "CREATE USER IF NOT EXISTS '%s'@'127.0.0.1' IDENTIFIED BY '%s';\n"
            . "GRANT ALL ON %s.* TO '%s'@'127.0.0.1';\n",
            self::DATABASE, self::USER, self::PASSWORD, self::DATABASE, self::USER,
        );
        if (file_put_contents($this->dir->file('init.sql'), $init) === false) {
            throw new \RuntimeException('cannot write the init file');
        }
    }

    private function spawn(): int
    {
        $log = $this->dir->file('mariadb.err');
        for ($attempt = 0; $attempt < 5; $attempt++) {
            $port = Ports::free();
            // setpriv execs, so the PID we signal is mariadbd itself; its --pdeathsig takes the server down with
            // PHPUnit even if PHPUnit is killed.
            $command = sprintf(
                'exec setpriv --pdeathsig SIGKILL -- %s --no-defaults --datadir=%s --socket=%s --pid-file=%s '
                . '--init-file=%s --log-error=%s --port=%d %s --bind-address=127.0.0.1 --skip-name-resolve '
                . '--skip-log-bin --max-connections=300 --innodb-buffer-pool-size=32M --innodb-log-file-size=16M '
                . '--innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0 --performance-schema=OFF',
                escapeshellarg(self::serverBinary()),
                escapeshellarg($this->dir->file('data')),
                escapeshellarg($this->dir->file('mariadb.sock')),
                escapeshellarg($this->dir->file('mariadb.pid')),
                escapeshellarg($this->dir->file('init.sql')),
                escapeshellarg($log),
                $port,
                self::userArg(),
            );
            $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'],
                2 => ['file', '/dev/null', 'w']], $pipes);
            if ($process === false) {
                throw new \RuntimeException('cannot start mariadbd');
            }
            $pid = proc_get_status($process)['pid'];
            $deadline = microtime(true) + 60.0;
            while (microtime(true) < $deadline) {
                if (!proc_get_status($process)['running']) {
                    break; // most likely the port was taken meanwhile: try another
                }
                if (self::ready($port)) {
                    $this->process = $process;
                    $this->pid = $pid;
                    return $port;
                }
                usleep(20_000);
            }
            posix_kill($pid, SIGKILL);
            proc_close($process);
        }
        throw new \RuntimeException('mariadbd did not start: ' . (string) @file_get_contents($log));
    }

    /** Whether the server sends its handshake (protocol version 10) on a new connection. */
    private static function ready(int $port): bool
    {
        $socket = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 0.5);
        if ($socket === false) {
            return false;
        }
        try {
            stream_set_timeout($socket, 1);
            $head = (string) fread($socket, 5);
            return strlen($head) === 5 && ord($head[4]) === 10;
        } finally {
            fclose($socket);
        }
    }

    /** `--user=root` when we are root: mariadbd refuses to run as root without it. */
    private static function userArg(): string
    {
        return posix_geteuid() === 0 ? '--user=root' : '';
    }

    private static function serverBinary(): string
    {
        foreach (['/usr/sbin/mariadbd', '/usr/sbin/mysqld'] as $path) {
            if (is_file($path)) {
                return $path;
            }
        }
        return 'mariadbd';
    }

    private static function tool(string $name): string
    {
        return is_file("/usr/bin/$name") ? "/usr/bin/$name" : $name;
    }

    private static function base(): string
    {
        return is_dir('/dev/shm') && is_writable('/dev/shm') ? '/dev/shm' : sys_get_temp_dir();
    }

    /** A SQL string literal; NO_BACKSLASH_ESCAPES is off by default, so backslashes are escaped too. */
    private static function literal(string $value): string
    {
        return "'" . str_replace(["\\", "'"], ["\\\\", "''"], $value) . "'";
    }

    /** Directories of earlier runs killed before they cleaned up: `leasehold-php-mariadb-PID-…` whose PID is gone. */
    private static function removeStaleDirs(string $base): void
    {
        foreach (glob($base . '/' . self::PREFIX . '*', GLOB_ONLYDIR) ?: [] as $dir) {
            $pid = (int) explode('-', substr(basename($dir), strlen(self::PREFIX)))[0];
            if ($pid > 0 && !file_exists("/proc/$pid")) {
                exec('rm -rf ' . escapeshellarg($dir));
            }
        }
    }
}

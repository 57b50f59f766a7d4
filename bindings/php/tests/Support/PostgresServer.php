<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * A PostgreSQL of the suite's own, like crates/leasehold-testkit's: `initdb` into a private directory, `postgres`
 * on a free loopback port (never 5432, no Unix socket), trust authentication for the `postgres` role, fsync off.
 * Stopped when the object goes away or PHPUnit exits. A missing PostgreSQL is an error, never a skip: the suite must
 * really run against PostgreSQL.
 *
 * Binaries come from `LEASEHOLD_TEST_PG_BIN` (a directory), else the newest `/usr/lib/postgresql/*\/bin`, else PATH.
 * As root, `initdb` and `postgres` run as the `postgres` system user, because PostgreSQL refuses to run as root.
 */
final class PostgresServer
{
    private const PREFIX = 'leasehold-php-postgres-';

    private static ?self $shared = null;

    public readonly int $port;
    private string $bin;
    private TempDir $dir;
    /** @var resource|null */
    private $process = null;
    private int $pid = 0;
    private int $ownerPid;

    private function __construct()
    {
        $this->ownerPid = getmypid();
        self::removeStaleDirs();
        $this->bin = self::binDir();
        $this->dir = new TempDir('postgres');
        $data = $this->dir->file('data');
        if (!mkdir($data, 0700)) {
            throw new \RuntimeException("cannot create $data");
        }
        $user = self::runAs();
        if ($user !== null) {
            // TempDir is 0700 and root's: the server's user must reach its data directory and write its log.
            foreach ([$this->dir->path, $data] as $path) {
                if (!chown($path, $user['uid']) || !chgrp($path, $user['gid'])) {
                    throw new \RuntimeException("cannot give $path to the postgres user");
                }
            }
        }
        $this->initdb($data);
        $this->port = $this->spawn($data);
        // Static properties are destroyed late and in no fixed order; stop the server explicitly at exit.
        register_shutdown_function([$this, 'stop']);
    }

    public static function start(): self
    {
        return new self();
    }

    /** One server for the tests that only need a working PostgreSQL; stopped when PHPUnit exits. */
    public static function shared(): self
    {
        return self::$shared ??= new self();
    }

    /** `postgres://postgres@127.0.0.1:PORT/postgres?lock=table`, with extra query parameters. */
    public function url(array $query = []): string
    {
        return 'postgres://postgres@127.0.0.1:' . $this->port . '/postgres?'
            . http_build_query(['lock' => 'table'] + $query);
    }

    /**
     * Deletes table mode's row for $key (default table and prefix) behind the library's back, as an operator's
     * DELETE would; exactly one row must go.
     */
    public function deleteLock(string $key): void
    {
        $sql = sprintf(
            "DELETE FROM leasehold_locks WHERE key = convert_to('leasehold:' || %s, 'UTF8')",
            self::literal($key),
        );
        $out = $this->psql($sql);
        if ($out !== 'DELETE 1') {
            throw new \RuntimeException("deleting the row of $key answered " . var_export($out, true)
                . ', expected DELETE 1');
        }
    }

    /** Runs one statement with psql as the `postgres` role; returns its trimmed output (rows, then the command tag). */
    public function psql(string $sql): string
    {
        $command = sprintf(
            '%s -X -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p %d -U postgres -d postgres -c %s 2>&1',
            escapeshellarg($this->bin . '/psql'),
            $this->port,
            escapeshellarg($sql),
        );
        exec($command, $lines, $exit);
        $out = trim(implode("\n", $lines));
        if ($exit !== 0) {
            throw new \RuntimeException("psql failed ($exit): $out");
        }
        return $out;
    }

    public function stop(): void
    {
        if ($this->process === null || getmypid() !== $this->ownerPid) {
            return;
        }
        // SIGQUIT: immediate shutdown, nothing to keep; SIGCONT first in case a test paused it.
        posix_kill($this->pid, SIGCONT);
        posix_kill($this->pid, SIGQUIT);
        $deadline = microtime(true) + 10.0;
        while (proc_get_status($this->process)['running'] && microtime(true) < $deadline) {
            usleep(10_000);
        }
        if (proc_get_status($this->process)['running']) {
            posix_kill($this->pid, SIGKILL);
        }
        proc_close($this->process);
        $this->process = null;
    }

    public function __destruct()
    {
        $this->stop();
    }

    private function initdb(string $data): void
    {
        $command = self::asServerUser(sprintf(
            '%s -A trust -U postgres -E UTF8 --no-sync -D %s',
            escapeshellarg($this->bin . '/initdb'),
            escapeshellarg($data),
        ));
        exec($command . ' 2>&1 >/dev/null', $lines, $exit);
        if ($exit !== 0) {
            throw new \RuntimeException("initdb failed ($exit): " . implode("\n", $lines));
        }
    }

    private function spawn(string $data): int
    {
        $log = $this->dir->file('postgres.log');
        for ($attempt = 0; $attempt < 5; $attempt++) {
            $port = Ports::free();
            // exec all the way down (setpriv execs too), so that the PID we signal is the postmaster itself.
            $command = 'exec ' . self::asServerUser(sprintf(
                '%s -D %s -p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories= '
                . '-c fsync=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=64MB '
                . '-c log_min_messages=warning -c logging_collector=off',
                escapeshellarg($this->bin . '/postgres'),
                escapeshellarg($data),
                $port,
            ));
            $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'],
                2 => ['file', $log, 'a']], $pipes);
            if ($process === false) {
                throw new \RuntimeException('cannot start postgres');
            }
            $pid = proc_get_status($process)['pid'];
            $deadline = microtime(true) + 30.0;
            while (microtime(true) < $deadline) {
                if (!proc_get_status($process)['running']) {
                    break;
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
        throw new \RuntimeException('postgres did not start: ' . (string) @file_get_contents($log));
    }

    /**
     * As root, $command run as the `postgres` user. setpriv execs (runuser and su stay as a parent that would not
     * pass on SIGKILL), and its --pdeathsig takes the server down with PHPUnit even if PHPUnit is killed.
     */
    private static function asServerUser(string $command): string
    {
        if (self::runAs() === null) {
            return $command;
        }
        $setpriv = trim((string) shell_exec('command -v setpriv'));
        if ($setpriv !== '') {
            return sprintf('%s --reuid=postgres --regid=postgres --init-groups --pdeathsig SIGQUIT -- %s',
                escapeshellarg($setpriv), $command);
        }
        return 'runuser -u postgres -- ' . $command;
    }

    /** @return array{uid: int, gid: int}|null the `postgres` user's ids when we are root */
    private static function runAs(): ?array
    {
        if (posix_geteuid() !== 0) {
            return null;
        }
        $user = posix_getpwnam('postgres');
        if ($user === false) {
            throw new \RuntimeException('running as root and there is no `postgres` user to run PostgreSQL as '
                . '(apt-get install postgresql creates it)');
        }
        return ['uid' => $user['uid'], 'gid' => $user['gid']];
    }

    private static function binDir(): string
    {
        $env = getenv('LEASEHOLD_TEST_PG_BIN');
        if (is_string($env) && $env !== '') {
            return rtrim($env, '/');
        }
        $versions = [];
        foreach (glob('/usr/lib/postgresql/*/bin/postgres') ?: [] as $postgres) {
            $version = basename(dirname($postgres, 2));
            if (ctype_digit($version) && is_file(dirname($postgres) . '/initdb')) {
                $versions[(int) $version] = dirname($postgres);
            }
        }
        if ($versions !== []) {
            krsort($versions);
            return reset($versions);
        }
        foreach (explode(':', (string) getenv('PATH')) as $dir) {
            if ($dir !== '' && is_file("$dir/initdb") && is_file("$dir/postgres") && is_file("$dir/psql")) {
                return $dir;
            }
        }
        throw new \RuntimeException('PostgreSQL is not installed (no initdb/postgres in /usr/lib/postgresql/*/bin '
            . 'or PATH; Debian: apt-get install postgresql); the suite does not skip the PostgreSQL tests');
    }

    /**
     * Whether the server accepts a session now: a startup packet answered by ReadyForQuery ('Z'), not by an error
     * such as "the database system is starting up" ('E'). A bare TCP connect succeeds before that.
     */
    private static function ready(int $port): bool
    {
        $socket = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 1.0);
        if ($socket === false) {
            return false;
        }
        stream_set_timeout($socket, 2);
        $body = pack('N', 196608) . "user\0postgres\0database\0postgres\0\0"; // protocol 3.0
        fwrite($socket, pack('N', strlen($body) + 4) . $body);
        $buffer = '';
        $at = 0;
        try {
            while (true) {
                while (strlen($buffer) >= $at + 5) {
                    $kind = $buffer[$at];
                    if ($kind === 'Z') {
                        fwrite($socket, "X\0\0\0\4");
                        return true;
                    }
                    if ($kind === 'E') {
                        return false;
                    }
                    $at += 1 + unpack('N', substr($buffer, $at + 1, 4))[1];
                }
                $chunk = fread($socket, 4096);
                if ($chunk === false || $chunk === '') {
                    return false;
                }
                $buffer .= $chunk;
            }
        } finally {
            fclose($socket);
        }
    }

    /** A SQL string literal (standard_conforming_strings is on since PostgreSQL 9.1). */
    private static function literal(string $value): string
    {
        return "'" . str_replace("'", "''", $value) . "'";
    }

    /** Directories of earlier runs killed before they cleaned up: `leasehold-php-postgres-PID-…` whose PID is gone. */
    private static function removeStaleDirs(): void
    {
        foreach (glob(sys_get_temp_dir() . '/' . self::PREFIX . '*', GLOB_ONLYDIR) ?: [] as $dir) {
            $pid = (int) explode('-', substr(basename($dir), strlen(self::PREFIX)))[0];
            if ($pid > 0 && !file_exists("/proc/$pid")) {
                exec('rm -rf ' . escapeshellarg($dir));
            }
        }
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/** A backend for the keep-alive, stats and event tests: its URL, and how to delete a lock underneath it. */
final class Backend
{
    private function __construct(
        public readonly string $name,
        public readonly string $url,
        private readonly \Closure $delete,
        private readonly ?TempDir $dir = null,
    ) {
    }

    public static function local(): self
    {
        $dir = new TempDir('php-observe');
        $locks = $dir->file('locks');
        return new self('local', 'file://' . $locks,
            static fn (string $key) => Underneath::deleteLocal($locks, $key), $dir);
    }

    public static function redis(): self
    {
        $server = RedisServer::shared();
        return new self('redis', $server->url(['connect_timeout_ms' => 2000, 'io_timeout_ms' => 2000]),
            static fn (string $key) => Underneath::deleteRedis($server->port, $key));
    }

    /** PostgreSQL table mode (`?lock=table`): the mode that can restore a lease in another process. */
    public static function postgres(): self
    {
        $server = PostgresServer::shared();
        return new self('postgres', $server->url(['connect_timeout_ms' => 2000, 'io_timeout_ms' => 2000]),
            static fn (string $key) => $server->deleteLock($key));
    }

    /**
     * MySQL/MariaDB on the suite's shared MariaDB, in table mode (the mode that can restore a lease in another
     * process, and whose rows can be deleted underneath) or named mode (`GET_LOCK`: exclusive locks and semaphores,
     * no restore; its lock belongs to a session, so nothing can delete it underneath).
     */
    public static function mysql(string $lock = 'table'): self
    {
        $server = MariaDbServer::shared();
        return new self('mysql-' . $lock, $server->url($lock, ['connect_timeout_ms' => 2000, 'io_timeout_ms' => 2000]),
            static function (string $key) use ($server, $lock): void {
                if ($lock !== 'table') {
                    throw new \LogicException('a named lock belongs to its session: nothing deletes it underneath');
                }
                $server->deleteLock($key);
            });
    }

    /** @return array<string, array{callable(): self}> for a @dataProvider */
    public static function both(): array
    {
        return ['local' => [[self::class, 'local']], 'redis' => [[self::class, 'redis']]];
    }

    /** Deletes the lock on $key behind the library's back. */
    public function deleteUnderneath(string $key): void
    {
        ($this->delete)($key);
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Fence;

use Leasehold\Exception\InternalException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\StaleFenceException;

/**
 * The fence gate at the store a lock protects: it refuses the late write of a holder whose lease ended while it
 * worked (a long GC pause, a stopped process, a slow network), after someone newer has written.
 *
 * It keeps, per resource, the highest fence it accepted, in a table of the protected database (`leasehold_fences`
 * by default). guard() runs inside the caller's transaction, before its writes: a fence equal to the stored one (the
 * same holder writing again) or newer passes and becomes the stored one; an older one throws StaleFenceException,
 * and the caller must roll back. The resource's row stays locked until that transaction ends, which is what orders
 * two writers: the second is judged against what the first committed.
 *
 * ```php
 * $gate = new Leasehold\Fence\PdoGate($pdo);
 * $pdo->beginTransaction();
 * try {
 *     $gate->guard('report:2026-11-29', $lock->fence());
 *     $pdo->prepare('UPDATE reports SET body = ? WHERE day = ?')->execute([$body, '2026-11-29']);
 *     $pdo->commit();
 * } catch (\Throwable $e) {
 *     $pdo->rollBack();
 *     throw $e;
 * }
 * ```
 *
 * Works on pdo_pgsql, pdo_mysql (MySQL and MariaDB, InnoDB) and pdo_sqlite, with the same SQL as the Rust gates
 * (docs/gate.md). Database errors surface as \PDOException whatever the connection's error mode. On SQLite, where a
 * writer locks the whole database, make guard() the transaction's first statement: it then waits for the write lock
 * (PDO::ATTR_TIMEOUT), whereas a transaction that read first may fail with SQLITE_BUSY (an error, never a stale write).
 */
final class PdoGate
{
    /** The longest resource name, in bytes (a primary key every driver indexes). */
    public const MAX_RESOURCE_BYTES = 1024;

    /** What each driver keeps of an identifier (SQLite has no limit; PostgreSQL's is NAMEDATALEN - 1). */
    private const MAX_IDENTIFIER = ['pgsql' => 63, 'mysql' => 64, 'sqlite' => 64];

    private readonly string $driver;
    private readonly string $quoted;

    /**
     * @param string $table An SQL identifier ([A-Za-z_][A-Za-z0-9_]*), optionally qualified by its schema or
     *                      database (`schema.table`), used exactly as given (quoted). Anything else is refused:
     *                      the name goes into SQL text.
     */
    public function __construct(private readonly \PDO $pdo, private readonly string $table = 'leasehold_fences')
    {
        $driver = (string) $pdo->getAttribute(\PDO::ATTR_DRIVER_NAME);
        if (!isset(self::MAX_IDENTIFIER[$driver])) {
            throw new InvalidArgumentException(
                "the fence gate supports the PDO drivers pgsql, mysql and sqlite, not '$driver'");
        }
        $parts = explode('.', $table);
        $max = self::MAX_IDENTIFIER[$driver];
        foreach ($parts as $part) {
            if (preg_match('/^[A-Za-z_][A-Za-z0-9_]*$/D', $part) !== 1 || strlen($part) > $max) {
                $parts = [];
                break;
            }
        }
        if ($parts === [] || count($parts) > 2) {
            throw new InvalidArgumentException(sprintf(
                'fence gate table %s: expected an SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes), '
                . 'optionally as schema.table', json_encode($table, JSON_INVALID_UTF8_SUBSTITUTE), $max));
        }
        $quote = $driver === 'mysql' ? '`' : '"';
        $this->driver = $driver;
        $this->quoted = implode('.', array_map(static fn (string $p): string => $quote . $p . $quote, $parts));
    }

    /** The gate's table, as given. */
    public function table(): string
    {
        return $this->table;
    }

    /**
     * Creates the table if it does not exist; safe to run from several processes at once. On MySQL, DDL commits an
     * open transaction: call it outside the transactions that write.
     */
    public function createTable(): void
    {
        $sql = match ($this->driver) {
            'pgsql' => "CREATE TABLE IF NOT EXISTS {$this->quoted} (resource text PRIMARY KEY, fence bigint NOT NULL, "
                . 'updated_at timestamptz NOT NULL DEFAULT now())',
            // VARBINARY: resources compare byte for byte, whatever the server's default collation.
            'mysql' => "CREATE TABLE IF NOT EXISTS {$this->quoted} (resource VARBINARY(" . self::MAX_RESOURCE_BYTES
                . ') NOT NULL PRIMARY KEY, fence BIGINT NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT '
                . 'CURRENT_TIMESTAMP(6)) ENGINE=InnoDB',
            'sqlite' => "CREATE TABLE IF NOT EXISTS {$this->quoted} (resource TEXT NOT NULL PRIMARY KEY, "
                . 'fence INTEGER NOT NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)',
        };
        try {
            $this->execute($sql, []);
        } catch (\PDOException $e) {
            // PostgreSQL: IF NOT EXISTS does not cover a creation racing ours, which ends in a unique violation on the
            // catalog; the table is there either way. (Inside a transaction the error has aborted it: let it show.)
            $raced = $this->driver === 'pgsql' && !$this->pdo->inTransaction()
                && in_array(self::sqlState($e), ['23505', '42P07', '42710'], true);
            if (!$raced) {
                throw $e;
            }
        }
    }

    /**
     * Lets the caller's writes to $resource through if $fence is at least the highest fence accepted for it so far,
     * and records $fence as the highest.
     *
     * @throws StaleFenceException       an older fence: roll the transaction back
     * @throws InvalidArgumentException  outside a transaction; an empty resource, one above 1024 bytes, with a NUL or
     *                                   not UTF-8; a fence below 1 (0 is no lease's fence)
     * @throws \PDOException             a database error (a deadlock or serialization failure: retry the transaction)
     */
    public function guard(string $resource, int $fence): void
    {
        if (!$this->pdo->inTransaction()) {
            throw new InvalidArgumentException('the fence gate must run inside the transaction that makes the '
                . 'protected writes: call $pdo->beginTransaction() first');
        }
        if ($resource === '' || strlen($resource) > self::MAX_RESOURCE_BYTES || str_contains($resource, "\0")
            || preg_match('//u', $resource) !== 1) {
            throw new InvalidArgumentException(sprintf(
                'fence gate: a resource must be 1 to %d bytes of UTF-8 without NUL (got %d bytes)',
                self::MAX_RESOURCE_BYTES, strlen($resource)));
        }
        if ($fence < 1) {
            throw new InvalidArgumentException("fence gate: fence $fence is not a lease's fence (they start at 1)");
        }
        $stored = $this->driver === 'mysql' ? $this->guardMysql($resource, $fence) : $this->guardUpsert($resource, $fence);
        if ($stored !== null) {
            throw new StaleFenceException($resource, $fence, $stored);
        }
    }

    /**
     * PostgreSQL and SQLite: one conditional upsert. It changes a row (rowCount 1) when it inserts or when the fence is
     * not older; 0 means refused, and the row, locked by the upsert all the same, is read back for the message.
     *
     * @return int|null the stored fence when refused
     */
    private function guardUpsert(string $resource, int $fence): ?int
    {
        $sql = $this->driver === 'pgsql'
            ? "INSERT INTO {$this->quoted} AS g (resource, fence) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE "
                . 'SET fence = EXCLUDED.fence, updated_at = now() WHERE g.fence <= EXCLUDED.fence'
            // In SQLite's DO UPDATE, a bare column is the existing row's.
            : "INSERT INTO {$this->quoted} (resource, fence) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE "
                . 'SET fence = excluded.fence, updated_at = CURRENT_TIMESTAMP WHERE fence <= excluded.fence';
        if ($this->execute($sql, [$resource, $fence])->rowCount() > 0) {
            return null;
        }
        // A statement of its own: in PostgreSQL it sees what a concurrent writer we waited for committed.
        return $this->storedFence("SELECT fence FROM {$this->quoted} WHERE resource = ?", $resource);
    }

    /**
     * MySQL/MariaDB: the affected-row count of `INSERT … ON DUPLICATE KEY UPDATE` cannot tell a refusal from an equal
     * fence (both leave the row unchanged: 0, or 1 with MYSQL_ATTR_FOUND_ROWS), so the upsert only writes (a newer or
     * equal fence replaces the stored one; it creates the row if needed and locks it), and the verdict comes from
     * reading the row back with a locking read, which sees the latest committed version. The upsert goes first: a
     * locking read of a row that does not exist yet takes a gap lock, on which two first writers deadlock.
     *
     * @return int|null the stored fence when refused
     */
    private function guardMysql(string $resource, int $fence): ?int
    {
        $this->execute(
            "INSERT INTO {$this->quoted} (resource, fence) VALUES (?, ?) ON DUPLICATE KEY UPDATE "
            // `updated_at` first: assignments run left to right and see the values already set.
            . 'updated_at = IF(fence <= ?, CURRENT_TIMESTAMP(6), updated_at), fence = IF(fence <= ?, ?, fence)',
            [$resource, $fence, $fence, $fence, $fence],
        );
        $stored = $this->storedFence("SELECT fence FROM {$this->quoted} WHERE resource = ? FOR UPDATE", $resource);
        if ($stored === $fence) {
            return null;
        }
        if ($stored === null || $stored < $fence) {
            // The upsert just wrote a fence at least ours, under a lock this transaction holds.
            throw new InternalException("fence gate on {$this->table}: after the upsert of fence $fence the row "
                . 'holds ' . var_export($stored, true), 5);
        }
        return $stored;
    }

    private function storedFence(string $sql, string $resource): ?int
    {
        $value = $this->execute($sql, [$resource])->fetchColumn();
        return $value === false || $value === null ? null : (int) $value;
    }

    /** Runs $sql with positional parameters (ints bound as integers), throwing \PDOException in every error mode. */
    private function execute(string $sql, array $params): \PDOStatement
    {
        $statement = $this->pdo->prepare($sql);
        if ($statement === false) {
            throw self::failure($this->pdo->errorInfo());
        }
        foreach ($params as $i => $value) {
            $statement->bindValue($i + 1, $value, is_int($value) ? \PDO::PARAM_INT : \PDO::PARAM_STR);
        }
        if (!$statement->execute()) {
            throw self::failure($statement->errorInfo());
        }
        return $statement;
    }

    /** The exception PDO would have thrown in ERRMODE_EXCEPTION (its SQLSTATE in errorInfo[0]). */
    private static function failure(array $info): \PDOException
    {
        $e = new \PDOException(sprintf('SQLSTATE[%s]: %s', $info[0] ?? 'HY000', $info[2] ?? 'unknown error'));
        $e->errorInfo = $info;
        return $e;
    }

    private static function sqlState(\PDOException $e): string
    {
        return (string) ($e->errorInfo[0] ?? $e->getCode());
    }
}

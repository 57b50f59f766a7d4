<?php

declare(strict_types=1);

namespace Leasehold\Tests\Fence;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\StaleFenceException;
use Leasehold\Fence\PdoGate;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\MariaDbServer;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\PostgresServer;
use Leasehold\Tests\Support\TempDir;

/**
 * The PDO fence gate on SQLite (in memory, and a file for the race), and on the suite's own PostgreSQL and MariaDB
 * (started like every backend test's; a missing server or PDO driver fails the test, never skips it): a newer or
 * equal fence passes, an older one throws StaleFenceException and its transaction commits nothing, a transaction that
 * commits later with an older fence loses a race, and bad input is refused before any SQL.
 */
final class PdoGateTest extends LeaseholdTestCase
{
    /** Kept alive for the SQLite file of a race. */
    private ?TempDir $dir = null;

    /** @return array<string, array{string}> */
    public static function drivers(): array
    {
        return ['sqlite' => ['sqlite'], 'pgsql' => ['pgsql'], 'mysql' => ['mysql']];
    }

    /** @return array{dsn: string, user: ?string, password: ?string} */
    private function target(string $driver): array
    {
        switch ($driver) {
            case 'sqlite':
                return ['dsn' => 'sqlite::memory:', 'user' => null, 'password' => null];
            case 'sqlite-file':
                $this->dir ??= new TempDir('gate');
                return ['dsn' => 'sqlite:' . $this->dir->file('store.db'), 'user' => null, 'password' => null];
            case 'pgsql':
                $server = PostgresServer::shared();
                return ['dsn' => "pgsql:host=127.0.0.1;port={$server->port};dbname=postgres", 'user' => 'postgres',
                    'password' => null];
            case 'mysql':
                $server = MariaDbServer::shared();
                return ['dsn' => "mysql:host=127.0.0.1;port={$server->port};dbname=" . MariaDbServer::DATABASE,
                    'user' => MariaDbServer::USER, 'password' => MariaDbServer::PASSWORD];
        }
        throw new \LogicException("no driver $driver");
    }

    private function connect(string $driver): \PDO
    {
        $t = $this->target($driver);
        return new \PDO($t['dsn'], $t['user'], $t['password'], [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
    }

    private static function table(): string
    {
        return 'gate_' . getmypid() . '_' . bin2hex(random_bytes(4));
    }

    private static function gate(\PDO $pdo, ?string $table = null): PdoGate
    {
        $gate = new PdoGate($pdo, $table ?? self::table());
        $gate->createTable();
        return $gate;
    }

    /** One transaction through the gate, committed if it passes; the stale refusal's stored fence otherwise. */
    private static function write(\PDO $pdo, PdoGate $gate, string $resource, int $fence): ?int
    {
        $pdo->beginTransaction();
        try {
            $gate->guard($resource, $fence);
            $pdo->commit();
            return null;
        } catch (StaleFenceException $e) {
            $pdo->rollBack();
            self::assertSame($resource, $e->resource());
            self::assertSame($fence, $e->fence());
            return $e->storedFence();
        }
    }

    private static function stored(\PDO $pdo, PdoGate $gate, string $resource): ?int
    {
        $q = $pdo->getAttribute(\PDO::ATTR_DRIVER_NAME) === 'mysql' ? '`' : '"';
        $statement = $pdo->prepare("SELECT fence FROM {$q}{$gate->table()}{$q} WHERE resource = ?");
        $statement->execute([$resource]);
        $value = $statement->fetchColumn();
        return $value === false ? null : (int) $value;
    }

    /** @dataProvider drivers */
    public function testNewerAndEqualFencesPassAnOlderOneIsRefused(string $driver): void
    {
        $pdo = $this->connect($driver);
        $gate = self::gate($pdo);
        $gate->createTable(); // twice is fine
        self::assertNull(self::write($pdo, $gate, 'report', 5), 'the first fence');
        self::assertNull(self::write($pdo, $gate, 'report', 7), 'a newer fence');
        self::assertNull(self::write($pdo, $gate, 'report', 7), 'the same holder again');
        self::assertSame(7, self::write($pdo, $gate, 'report', 6), 'an older fence names the stored one');
        self::assertSame(7, self::stored($pdo, $gate, 'report'));
        self::assertNull(self::write($pdo, $gate, 'Report', 1), 'resources compare byte for byte');
        self::assertNull(self::write($pdo, $gate, 'report', PHP_INT_MAX), 'the largest fence');
        self::assertSame(PHP_INT_MAX, self::stored($pdo, $gate, 'report'));
    }

    /** @dataProvider drivers */
    public function testARefusedTransactionCommitsNothingOfItsOwn(string $driver): void
    {
        $pdo = $this->connect($driver);
        $gate = self::gate($pdo);
        $items = self::table();
        $pdo->exec("CREATE TABLE $items (resource VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(64) NOT NULL)"
            . ($driver === 'mysql' ? ' ENGINE=InnoDB' : ''));
        self::assertNull(self::write($pdo, $gate, 'invoice', 9));

        // The stale holder writes first and asks the gate after: its write must go with the refusal.
        $pdo->beginTransaction();
        $pdo->exec("INSERT INTO $items VALUES ('invoice', 'stale')");
        try {
            $gate->guard('invoice', 8);
            self::fail('fence 8 after 9 must be refused');
        } catch (StaleFenceException $e) {
            self::assertSame(['invoice', 8, 9], [$e->resource(), $e->fence(), $e->storedFence()]);
            self::assertSame(StaleFenceException::STATUS, $e->getCode());
            self::assertInstanceOf(LeaseholdException::class, $e);
            self::assertInstanceOf(\RuntimeException::class, $e);
            $pdo->rollBack();
        }
        self::assertSame([], $pdo->query("SELECT value FROM $items")->fetchAll(\PDO::FETCH_COLUMN));

        $pdo->beginTransaction();
        $gate->guard('invoice', 9);
        $pdo->exec("INSERT INTO $items VALUES ('invoice', 'current')");
        $pdo->commit();
        self::assertSame(['current'], $pdo->query("SELECT value FROM $items")->fetchAll(\PDO::FETCH_COLUMN));
    }

    /** @return array<string, array{string}> */
    public static function racers(): array
    {
        return ['sqlite-file' => ['sqlite-file'], 'pgsql' => ['pgsql'], 'mysql' => ['mysql']];
    }

    /**
     * Transaction A passes the gate with fence 5 and holds it; B, another process, asks with 4 meanwhile and must
     * wait for A's commit, then be refused against what A committed. The other way round (A with 4, B with 5) both
     * pass. Both on a resource written before and on a new one.
     *
     * @dataProvider racers
     */
    public function testTheOlderFenceCommittingLaterLosesARace(string $driver): void
    {
        foreach ([[5, 4, ['stale' => 5, 'fence' => 4]], [4, 5, ['ok' => true]]] as [$first, $second, $expected]) {
            foreach ([false, true] as $newResource) {
                $pdo = $this->connect($driver);
                $gate = self::gate($pdo);
                if (!$newResource) {
                    self::assertNull(self::write($pdo, $gate, 'ledger', 1));
                }
                $pdo->beginTransaction();
                $gate->guard('ledger', $first);

                $t = $this->target($driver);
                $b = Php::start(__DIR__ . '/gate_writer.php', [], [
                    'GATE_DSN' => $t['dsn'], 'GATE_USER' => (string) $t['user'],
                    'GATE_PASSWORD' => (string) $t['password'], 'GATE_TABLE' => $gate->table(),
                    'GATE_RESOURCE' => 'ledger', 'GATE_FENCE' => (string) $second,
                ]);
                $seen = self::readUntil($b, "guarding\n", 20.0);
                usleep(300_000);
                $seen .= (string) stream_get_contents($b['pipes'][1]);
                self::assertSame("guarding\n", $seen, "B must wait for A's lock ($first then $second)");
                $pdo->commit();
                $out = Php::finish($b, 30.0);
                $label = "$driver, $first then $second, " . ($newResource ? 'new resource' : 'existing resource');
                self::assertSame(0, $out['exit'], "$label: {$out['stdout']} {$out['stderr']}");
                // What B printed after "guarding" (already read above).
                $result = json_decode(trim($out['stdout']), true);
                self::assertSame($expected, $result, $label);
                self::assertSame(5, self::stored($pdo, $gate, 'ledger'), $label);
            }
        }
    }

    /** Reads the child's stdout until it has printed $line (or fails after $timeout seconds). */
    private static function readUntil(array $run, string $line, float $timeout): string
    {
        $seen = '';
        $deadline = microtime(true) + $timeout;
        while (!str_contains($seen, $line)) {
            if (microtime(true) > $deadline) {
                self::fail('the second writer did not start: ' . $seen . stream_get_contents($run['pipes'][2]));
            }
            $seen .= (string) stream_get_contents($run['pipes'][1]);
            usleep(10_000);
        }
        return $seen;
    }

    /** @dataProvider drivers */
    public function testBadInputIsRefusedBeforeAnySql(string $driver): void
    {
        $pdo = $this->connect($driver);
        $gate = self::gate($pdo);
        try {
            $gate->guard('r', 1);
            self::fail('outside a transaction the gate must refuse');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('beginTransaction', $e->getMessage());
        }
        $pdo->beginTransaction();
        $bad = [['', 1], ["a\0b", 1], ["\xff\xfe", 1], [str_repeat('r', 1025), 1], ['r', 0], ['r', -5],
            ['r', PHP_INT_MIN]];
        foreach ($bad as [$resource, $fence]) {
            try {
                $gate->guard($resource, $fence);
                self::fail(sprintf('%s/%d must be refused', bin2hex(substr($resource, 0, 8)), $fence));
            } catch (InvalidArgumentException $e) {
                self::assertInstanceOf(LeaseholdException::class, $e);
            }
        }
        $gate->guard(str_repeat('r', 1024), 1);
        $pdo->commit();
        self::assertSame(1, self::stored($pdo, $gate, str_repeat('r', 1024)), 'the transaction was still usable');
    }

    /** @dataProvider drivers */
    public function testTableNamesMustBeIdentifiers(string $driver): void
    {
        $pdo = $this->connect($driver);
        $longest = $driver === 'pgsql' ? 63 : 64;
        foreach (['', 'a.b.c', '1abc', 'a-b', 'a b', 'x;DROP TABLE y', '"q"', '`q`', 'tä', '.a', 'a.',
            str_repeat('t', $longest + 1)] as $bad) {
            try {
                new PdoGate($pdo, $bad);
                self::fail("table name '$bad' must be refused");
            } catch (InvalidArgumentException $e) {
                self::assertStringContainsString('identifier', $e->getMessage());
            }
        }
        self::assertSame('leasehold_fences', (new PdoGate($pdo))->table());
        new PdoGate($pdo, str_repeat('t', $longest));

        // Qualified by its schema (PostgreSQL), database (MySQL) or attached database (SQLite).
        $qualifier = match ($driver) {
            'pgsql' => 'public',
            'mysql' => MariaDbServer::DATABASE,
            'sqlite' => 'main',
        };
        $gate = self::gate($pdo, $qualifier . '.' . self::table());
        self::assertNull(self::write($pdo, $gate, 'r', 3));
        self::assertSame(3, self::write($pdo, $gate, 'r', 2));
    }

    /** Database errors are \PDOException whatever the error mode, with the SQLSTATE in errorInfo. */
    public function testDatabaseErrorsAreExceptionsEvenInSilentMode(): void
    {
        $pdo = new \PDO('sqlite::memory:', null, null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_SILENT]);
        $gate = new PdoGate($pdo, 'never_created');
        $pdo->beginTransaction();
        try {
            $gate->guard('r', 1);
            self::fail('a missing table must fail');
        } catch (\PDOException $e) {
            self::assertStringContainsString('never_created', $e->getMessage());
            self::assertSame('HY000', $e->errorInfo[0]);
        }
        $pdo->rollBack();
    }

    public function testOtherDriversAreRefused(): void
    {
        // A driver without the gate's SQL: only the three are known. pdo_sqlite is the one always here, so the
        // refusal is shown by its message on a stand-in.
        $pdo = new class ('sqlite::memory:') extends \PDO {
            public function getAttribute(int $attribute): mixed
            {
                return $attribute === \PDO::ATTR_DRIVER_NAME ? 'odbc' : parent::getAttribute($attribute);
            }
        };
        $this->expectException(InvalidArgumentException::class);
        $this->expectExceptionMessage("not 'odbc'");
        new PdoGate($pdo);
    }
}

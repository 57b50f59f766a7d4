<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Lock;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * The PHP layer's argument checks with seeded random inputs: keys of any bytes and length, TTLs and waits of
 * every type and edge (NAN, INF, negative, -0.0, huge, numeric strings, null, arrays), permits out of range,
 * tokens of any bytes. Every call must either work or throw one of the documented exceptions
 * (InvalidArgumentException; LockLostException for a well-formed token nobody holds): never a PHP error,
 * a TypeError or a crash. Where the outcome is clear from the input alone, it must be that outcome.
 *
 * LEASEHOLD_FUZZ_SEED replays a run (the seed is printed on stderr); LEASEHOLD_FUZZ_CASES sets its length.
 */
final class FuzzTest extends LeaseholdTestCase
{
    private const TTL_MAX_MS = 604_800_000;

    private static ?TempDir $dir = null;

    public static function setUpBeforeClass(): void
    {
        self::$dir = new TempDir('fuzz');
    }

    public static function tearDownAfterClass(): void
    {
        self::$dir = null;
    }

    /** @return list<mixed> */
    private static function edgeNumbers(): array
    {
        return [
            0, -0.0, 0.0, 1, -1, 0.0004, 0.001, 5e-324, -5e-324, NAN, INF, -INF, PHP_INT_MAX, PHP_INT_MIN,
            intdiv(PHP_INT_MAX, 1000), intdiv(PHP_INT_MAX, 1000) + 1, 604800, 604800.0, 604800.0005, 604801,
            2.0 ** 63 / 1000, PHP_FLOAT_MAX, -PHP_FLOAT_MAX, PHP_FLOAT_EPSILON, PHP_FLOAT_MIN,
            '30', '0.5', '', ' 1', '1e3', '0x1A', 'NAN', null, true, false, [1], [], new \stdClass(),
        ];
    }

    private static function number(): mixed
    {
        return match (mt_rand(0, 3)) {
            0, 1 => self::edgeNumbers()[mt_rand(0, count(self::edgeNumbers()) - 1)],
            2 => mt_rand(-1000, 1000) / mt_rand(1, 1000),
            default => mt_rand(0, 1) === 0 ? mt_rand(PHP_INT_MIN, PHP_INT_MAX) : mt_rand(0, 5),
        };
    }

    private static function bytes(int $length): string
    {
        $out = '';
        for ($i = 0; $i < $length; $i++) {
            $out .= chr(mt_rand(0, 255));
        }
        return $out;
    }

    private static function key(): string
    {
        $length = match (mt_rand(0, 6)) {
            0 => 0,
            1 => 1024,
            2 => 1025,
            3 => mt_rand(1000, 1100),
            default => mt_rand(1, 40),
        };
        // A small key space now and then, so calls meet each other's leases.
        if ($length > 0 && $length <= 1024 && mt_rand(0, 1) === 0) {
            return 'fuzz:' . chr(ord('a') + mt_rand(0, 3));
        }
        return self::bytes($length);
    }

    private static function token(): string
    {
        $hex = '';
        for ($i = 0; $i < 32; $i++) {
            $hex .= '0123456789abcdef'[mt_rand(0, 15)];
        }
        return match (mt_rand(0, 5)) {
            0 => self::bytes(mt_rand(0, 40)),
            1 => strtoupper($hex),
            2 => $hex . "\n",
            3 => substr($hex, 0, mt_rand(0, 31)),
            default => $hex,
        };
    }

    private static function permits(): int
    {
        $edges = [0, 1, 65535, 65536, -1, PHP_INT_MAX, PHP_INT_MIN];
        return mt_rand(0, 1) === 0 ? $edges[mt_rand(0, count($edges) - 1)] : mt_rand(-5, 70000);
    }

    private static function keyValid(string $key): bool
    {
        return $key !== '' && strlen($key) <= 1024;
    }

    /**
     * Whether $seconds is clearly valid (true), clearly invalid (false), or near a boundary where rounding
     * decides (null). $min is the least valid number of milliseconds (1 for a TTL, 0 for a wait).
     */
    private static function secondsValid(mixed $seconds, int $min): ?bool
    {
        if (!is_int($seconds) && !is_float($seconds)) {
            return false;
        }
        if (is_float($seconds) && (is_nan($seconds) || is_infinite($seconds))) {
            return false;
        }
        if ($seconds < 0) {
            return false;
        }
        $ms = $seconds * 1000.0;
        if ($ms > self::TTL_MAX_MS + 1) {
            return false;
        }
        if ($ms > self::TTL_MAX_MS - 1) {
            return null;
        }
        if ($min === 1 && $ms == 0) {
            return false;
        }
        return $min === 0 || $ms >= 1 ? true : null;
    }

    private static function describe(mixed $value): string
    {
        if (is_string($value)) {
            return sprintf('string(%d) %s', strlen($value), bin2hex(substr($value, 0, 24)));
        }
        if (is_float($value)) {
            return 'float ' . var_export($value, true);
        }
        return get_debug_type($value) . (is_scalar($value) ? ' ' . var_export($value, true) : '');
    }

    public function testRandomArgumentsGiveOnlyDocumentedOutcomes(): void
    {
        $seed = (int) (getenv('LEASEHOLD_FUZZ_SEED') ?: random_int(1, PHP_INT_MAX));
        $cases = (int) (getenv('LEASEHOLD_FUZZ_CASES') ?: 3000);
        fwrite(STDERR, sprintf("\nPHP fuzz: LEASEHOLD_FUZZ_SEED=%d LEASEHOLD_FUZZ_CASES=%d\n", $seed, $cases));
        mt_srand($seed);
        $client = Client::connect('file://' . self::$dir?->path);
        $counts = ['ok' => 0, 'invalid' => 0, 'lost' => 0, 'expired' => 0];
        for ($n = 0; $n < $cases; $n++) {
            $key = self::key();
            $ttl = self::number();
            $wait = self::number();
            $permits = self::permits();
            $token = self::token();
            $op = mt_rand(0, 6);
            // What the inputs alone decide: true (must work), false (must be refused), null (either).
            $expect = match ($op) {
                0, 1 => self::andAll(self::keyValid($key), self::secondsValid($ttl, 1), self::secondsValid($wait, 0)),
                2 => self::andAll(self::keyValid($key), $permits >= 1 && $permits <= 65535, self::secondsValid($ttl, 1),
                    self::secondsValid($wait, 0)),
                // extend(null) means "this lock's TTL".
                3 => self::andAll(self::keyValid($key), self::secondsValid($ttl, 1),
                    $wait === null ? true : self::secondsValid($wait, 1)),
                4 => self::andAll(self::keyValid($key), preg_match('/^[0-9a-f]{32}$/D', $token) === 1,
                    self::secondsValid($ttl, 1)),
                5 => self::keyValid($key),
                default => self::andAll(self::keyValid($key), self::secondsValid($ttl, 1), self::secondsValid($wait, 0)),
            };
            $context = fn (): string => sprintf(
                'case %d (seed %d), op %d: key %s, ttl %s, wait %s, permits %d, token %s',
                $n, $seed, $op, self::describe($key), self::describe($ttl), self::describe($wait), $permits,
                self::describe($token),
            );
            try {
                $outcome = $this->call($client, $op, $key, $ttl, $wait, $permits, $token);
                self::assertNotFalse($expect, 'accepted bad input: ' . $context());
                $counts['ok']++;
            } catch (InvalidArgumentException $e) {
                self::assertNotTrue($expect, 'refused good input: ' . $e->getMessage() . ' in ' . $context());
                self::assertNotSame('', $e->getMessage());
                $counts['invalid']++;
            } catch (LockLostException $e) {
                // Documented twice over: a restore of a token nobody holds, and a release or extend of a lease
                // whose TTL ran out before it (a TTL of a few milliseconds can, on a busy machine).
                $expired = $op !== 4 && self::shortLived($op === 3 ? [$ttl, $wait] : [$ttl]);
                self::assertTrue($op === 4 || $expired,
                    'lost outside restoreLock and with a long TTL: ' . $e->getMessage() . ' in ' . $context());
                $counts[$op === 4 ? 'lost' : 'expired']++;
            } catch (\Throwable $e) {
                self::fail(sprintf('%s: %s in %s', get_class($e), $e->getMessage(), $context()));
            }
        }
        fwrite(STDERR, sprintf(
            "PHP fuzz: %d cases: %d accepted, %d refused as invalid, %d lost (restore of a token nobody holds), "
                . "%d expired before their release (TTL under a second)\n",
            $cases, $counts['ok'], $counts['invalid'], $counts['lost'], $counts['expired'],
        ));
        self::assertSame($cases, array_sum($counts));
    }

    /** @param list<mixed> $ttls whether any of these (valid) TTLs is short enough to run out within a call */
    private static function shortLived(array $ttls): bool
    {
        foreach ($ttls as $ttl) {
            if ((is_int($ttl) || is_float($ttl)) && $ttl < 1.0) {
                return true;
            }
        }
        return false;
    }

    private static function andAll(bool|null ...$parts): ?bool
    {
        if (in_array(false, $parts, true)) {
            return false;
        }
        return in_array(null, $parts, true) ? null : true;
    }

    private function call(Client $client, int $op, string $key, mixed $ttl, mixed $wait, int $permits, string $token): bool
    {
        switch ($op) {
            case 0:
                $lock = $client->createLock($key, $ttl);
                return $this->takeAndGive($lock, $wait);
            case 1:
                $lock = $client->createSharedLock($key, $ttl);
                return $this->takeAndGive($lock, $wait);
            case 2:
                $permit = $client->createSemaphore($key, $permits, $ttl)->acquire($wait);
                $permit?->release();
                return $permit !== null;
            case 3:
                // extend() with a random TTL on a held lock ($wait stands for the new TTL).
                $lock = $client->createLock($key, $ttl);
                if (!$lock->tryAcquire()) {
                    return false; // never seen: every case gives back what it took
                }
                try {
                    $lock->extend($wait);
                } finally {
                    $lock->release();
                }
                return true;
            case 4:
                $lock = $client->restoreLock($key, $token, $ttl);
                $lock->detach();
                return true;
            case 5:
                $client->forceRelease($key);
                return true;
            default:
                return $client->synchronized($key, static fn (Lock $lock): bool => $lock->isAcquired(), $ttl, $wait);
        }
    }

    private function takeAndGive(Lock $lock, mixed $wait): bool
    {
        $got = $lock->acquire($wait);
        $lock->release();
        return $got;
    }
}

<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Key;
use Leasehold\Seconds;
use PHPUnit\Framework\TestCase;

/** Seconds to milliseconds, and keys: the checks PHP makes before anything reaches the library. */
final class SecondsTest extends TestCase
{
    /** @return array<string, array{int|float, int}> */
    public static function conversions(): array
    {
        return [
            'zero' => [0, 0],
            'zero float' => [0.0, 0],
            'negative zero' => [-0.0, 0],
            'int seconds' => [30, 30_000],
            'float seconds' => [30.0, 30_000],
            'whole milliseconds stay whole (0.07 s)' => [0.07, 70],
            'whole milliseconds stay whole (0.29 s)' => [0.29, 290],
            'whole milliseconds stay whole (1.001 s)' => [1.001, 1001],
            'a sub-millisecond part rounds up' => [1.0011, 1002],
            'below a millisecond is one' => [0.0004, 1],
            'the smallest positive float is one' => [5e-324, 1],
            'largest int that fits' => [intdiv(PHP_INT_MAX, 1000), intdiv(PHP_INT_MAX, 1000) * 1000],
            'seven days' => [604800.0, 604_800_000],
        ];
    }

    /** @dataProvider conversions */
    public function testConversion(int|float $seconds, int $millis): void
    {
        self::assertSame($millis, Seconds::toMillis($seconds, 'ttl'));
    }

    /** @return array<string, array{mixed}> */
    public static function refused(): array
    {
        return [
            'negative' => [-1.0],
            'negative int' => [-1],
            'tiny negative' => [-5e-324],
            'NAN' => [NAN],
            'INF' => [INF],
            '-INF' => [-INF],
            'numeric string' => ['30'],
            'numeric float string' => ['0.5'],
            'empty string' => [''],
            'null' => [null],
            'bool' => [true],
            'array' => [[1]],
            'object' => [new \stdClass()],
            'int just above the limit' => [intdiv(PHP_INT_MAX, 1000) + 1],
            'PHP_INT_MAX' => [PHP_INT_MAX],
            '2^63 ms as a float' => [2.0 ** 63 / 1000],
            '2^64 seconds (a float in PHP)' => [18446744073709551616],
            'the largest float' => [PHP_FLOAT_MAX],
        ];
    }

    /** @dataProvider refused */
    public function testRefused(mixed $seconds): void
    {
        try {
            $millis = Seconds::toMillis($seconds, 'wait');
            // 2^63 / 1000 * 1000 may land one ulp below 2^63: still far above anything the library accepts.
            self::assertGreaterThan(604_800_000, $millis, 'accepted: ' . var_export($seconds, true));
        } catch (InvalidArgumentException $e) {
            self::assertStringStartsWith('wait ', $e->getMessage());
        }
    }

    public function testNumericStringsAreRefusedEvenWhereTypesAreCoerced(): void
    {
        // A file without strict_types would turn '30' into 30 for a float parameter; Leasehold checks itself.
        $this->expectException(InvalidArgumentException::class);
        Seconds::toMillis('30', 'ttl');
    }

    public function testKeyBounds(): void
    {
        Key::check('k');
        Key::check(str_repeat("\0", 1024));
        foreach (['', str_repeat('k', 1025)] as $bad) {
            try {
                Key::check($bad);
                self::fail('accepted a key of ' . strlen($bad) . ' bytes');
            } catch (InvalidArgumentException $e) {
                self::assertStringContainsString('1 to 1024 bytes', $e->getMessage());
            }
        }
    }

    public function testKeysAreDescribedPrintablyAndBounded(): void
    {
        self::assertSame('"report:2026-11-29"', Key::describe('report:2026-11-29'));
        self::assertSame('"hex:610062"', Key::describe("a\0b"));
        self::assertSame('"hex:ff"', Key::describe("\xff"));
        self::assertLessThanOrEqual(82, strlen(Key::describe(str_repeat('x', 1024))));
        self::assertSame(1, preg_match('//u', Key::describe(str_repeat('ключ', 100))), 'cut on a UTF-8 boundary');
    }
}

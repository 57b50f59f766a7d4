<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\InvalidArgumentException;

/** @internal seconds from PHP (int or float) to the whole milliseconds the C library takes */
final class Seconds
{
    /** 2^63 as a float: the first value that no longer fits a PHP int. */
    private const LIMIT = 9.2233720368547758E+18;

    /**
     * Sub-millisecond parts round up (a 0.1 ms TTL is 1 ms, never 0). Checks the type itself instead of trusting a
     * declaration, so that numeric strings are refused even in files without strict_types.
     */
    public static function toMillis(mixed $seconds, string $name): int
    {
        if (is_int($seconds)) {
            if ($seconds < 0) {
                throw new InvalidArgumentException(sprintf('%s must not be negative, got %d s', $name, $seconds));
            }
            if ($seconds > intdiv(PHP_INT_MAX, 1000)) {
                throw new InvalidArgumentException(sprintf('%s is too large: %d s', $name, $seconds));
            }
            return $seconds * 1000;
        }
        if (!is_float($seconds)) {
            throw new InvalidArgumentException(sprintf(
                '%s must be seconds as a float or an int, got %s',
                $name,
                get_debug_type($seconds),
            ));
        }
        if (is_nan($seconds)) {
            throw new InvalidArgumentException(sprintf('%s must be a number of seconds, got NAN', $name));
        }
        if ($seconds < 0) {
            throw new InvalidArgumentException(sprintf('%s must not be negative, got %s s', $name, $seconds));
        }
        if (is_infinite($seconds)) {
            throw new InvalidArgumentException(sprintf('%s must be finite, got INF', $name));
        }
        if ($seconds >= self::LIMIT / 1000.0) {
            // Checked before multiplying: near PHP_FLOAT_MAX the product is INF, and INF - INF is NAN.
            throw new InvalidArgumentException(sprintf('%s is too large: %s s', $name, $seconds));
        }
        $millis = $seconds * 1000.0;
        // 0.07 * 1000 is 70.00000000000001 in binary floating point; a relative nudge far above the float's
        // error keeps such values at 70 ms, while anything really above a whole millisecond still rounds up.
        $millis = ceil($millis - $millis * 1e-14);
        if (!($millis < self::LIMIT)) {
            throw new InvalidArgumentException(sprintf('%s is too large: %s s', $name, $seconds));
        }
        return (int) $millis;
    }
}

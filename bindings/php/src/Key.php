<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\InvalidArgumentException;

/** @internal lock keys: 1 to 1024 arbitrary bytes */
final class Key
{
    public const MAX_BYTES = 1024;

    public static function check(string $key): void
    {
        $length = strlen($key);
        if ($length === 0) {
            throw new InvalidArgumentException('the key is empty; a key is 1 to 1024 bytes');
        }
        if ($length > self::MAX_BYTES) {
            throw new InvalidArgumentException(sprintf('the key is %d bytes long; a key is 1 to 1024 bytes', $length));
        }
    }

    /** A printable, bounded form of a key for messages: keys are binary-safe and may be long. */
    public static function describe(string $key): string
    {
        $printable = preg_match('//u', $key) === 1 && preg_match('/[\x00-\x1f\x7f]/', $key) === 0;
        $shown = $printable ? $key : 'hex:' . bin2hex($key);
        if (strlen($shown) > 80) {
            // mb_strcut keeps a message valid UTF-8 (logs and JSON choke on half a character).
            $cut = $printable && function_exists('mb_strcut') ? mb_strcut($shown, 0, 77, 'UTF-8') : substr($shown, 0, 77);
            $shown = $cut . '...';
        }
        return '"' . $shown . '"';
    }
}

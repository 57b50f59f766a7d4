<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * Removes a lock behind the library's back, as an operator, a flushed Redis or a wiped directory would: the local
 * backend's record file, or the Redis lock key (a raw DEL over RESP).
 */
final class Underneath
{
    /** A key the local backend shows verbatim in its record file name (letters, digits, '-'; at most 40 bytes). */
    public static function key(string $label): string
    {
        return $label . '-' . bin2hex(random_bytes(6));
    }

    public static function deleteLocal(string $dir, string $key): void
    {
        $files = glob($dir . '/k-' . $key . '-*.lock') ?: [];
        if (count($files) !== 1) {
            throw new \RuntimeException("expected one record file for $key in $dir, found " . count($files));
        }
        if (!unlink($files[0])) {
            throw new \RuntimeException("cannot delete {$files[0]}");
        }
    }

    /**
     * A lease's Redis key name: `prefix ‖ "{" ‖ 16 hex digits of SHA-256(prefix ‖ key) ‖ "}" ‖ tag ‖ key`, the hash tag
     * that keeps a lease's keys in one Cluster slot (crates/leasehold-redis/src/keys.rs).
     */
    public static function redisKey(string $prefix, string $tag, string $key): string
    {
        return $prefix . '{' . substr(hash('sha256', $prefix . $key), 0, 16) . '}' . $tag . $key;
    }

    public static function deleteRedis(int $port, string $key): void
    {
        $socket = stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 5.0);
        if ($socket === false) {
            throw new \RuntimeException("cannot reach redis on $port: $error");
        }
        $lockKey = self::redisKey('leasehold:', 'l:', $key);
        fwrite($socket, sprintf("*2\r\n\$3\r\nDEL\r\n\$%d\r\n%s\r\n", strlen($lockKey), $lockKey));
        stream_set_timeout($socket, 5);
        $reply = (string) fgets($socket);
        fclose($socket);
        if ($reply !== ":1\r\n") {
            throw new \RuntimeException("DEL $lockKey answered " . var_export($reply, true) . ', expected :1');
        }
    }
}

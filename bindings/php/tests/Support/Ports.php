<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

final class Ports
{
    /**
     * A loopback TCP port that nothing listens on now, below the kernel's ephemeral range: an
     * outgoing connection takes its local port from that range, so it cannot grab the port between
     * this check and the server's bind, nor the port of a server a test stops and starts again.
     */
    public static function free(): int
    {
        $high = self::ephemeralLow();
        for ($attempt = 0; $attempt < 200; $attempt++) {
            $port = random_int(10000, $high - 1);
            if ($port === 6379 || $port === 5432) {
                continue;
            }
            $server = @stream_socket_server("tcp://127.0.0.1:$port", $errno, $error);
            if ($server === false) {
                continue;
            }
            fclose($server);
            if (!self::answers($port)) {
                return $port;
            }
        }
        throw new \RuntimeException('no free loopback port');
    }

    /** The first port of the kernel's ephemeral range (32768 where it cannot be read). */
    private static function ephemeralLow(): int
    {
        $range = @file_get_contents('/proc/sys/net/ipv4/ip_local_port_range');
        $low = $range === false ? 0 : (int) preg_split('/\s+/', trim($range))[0];
        return $low > 11000 ? $low : 32768;
    }

    public static function answers(int $port): bool
    {
        $socket = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 0.2);
        if ($socket === false) {
            return false;
        }
        fclose($socket);
        return true;
    }
}

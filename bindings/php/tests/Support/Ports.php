<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

final class Ports
{
    /** A loopback TCP port that nothing listens on now (the kernel picks it; never 6379 or 5432). */
    public static function free(): int
    {
        for ($attempt = 0; $attempt < 20; $attempt++) {
            $server = @stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
            if ($server === false) {
                throw new \RuntimeException("cannot bind a loopback port: $error");
            }
            $name = stream_socket_get_name($server, false);
            fclose($server);
            $port = (int) substr((string) $name, strrpos((string) $name, ':') + 1);
            if ($port !== 6379 && $port !== 5432 && $port > 0) {
                return $port;
            }
        }
        throw new \RuntimeException('no free loopback port');
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

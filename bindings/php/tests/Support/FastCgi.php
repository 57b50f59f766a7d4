<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/** A minimal FastCGI client (one GET request, no keep-alive): enough to ask php-fpm to run a script. */
final class FastCgi
{
    private const BEGIN_REQUEST = 1;
    private const END_REQUEST = 3;
    private const PARAMS = 4;
    private const STDIN = 5;
    private const STDOUT = 6;
    private const STDERR = 7;
    private const RESPONDER = 1;

    /**
     * @param string $address e.g. tcp://127.0.0.1:9000 or unix:///run/php-fpm.sock
     * @return array{headers: string, body: string, stderr: string}
     */
    public static function get(string $address, string $script, string $query = '', float $timeout = 30.0): array
    {
        return self::receive(self::send($address, $script, $query, $timeout));
    }

    /**
     * Sends a request without waiting for the answer, so that several can be in flight at once.
     *
     * @return resource the connection, for receive()
     */
    public static function send(string $address, string $script, string $query = '', float $timeout = 30.0)
    {
        $socket = @stream_socket_client($address, $errno, $error, $timeout);
        if ($socket === false) {
            throw new \RuntimeException("cannot connect to $address: $error");
        }
        stream_set_timeout($socket, (int) ceil($timeout));
        $params = [
            'GATEWAY_INTERFACE' => 'FastCGI/1.0',
            'REQUEST_METHOD' => 'GET',
            'SCRIPT_FILENAME' => $script,
            'SCRIPT_NAME' => '/' . basename($script),
            'REQUEST_URI' => '/' . basename($script) . ($query === '' ? '' : '?' . $query),
            'QUERY_STRING' => $query,
            'SERVER_SOFTWARE' => 'leasehold-tests',
            'SERVER_PROTOCOL' => 'HTTP/1.1',
            'SERVER_NAME' => 'localhost',
            'SERVER_PORT' => '80',
            'REMOTE_ADDR' => '127.0.0.1',
            'CONTENT_LENGTH' => '0',
        ];
        $encoded = '';
        foreach ($params as $name => $value) {
            $encoded .= self::length(strlen($name)) . self::length(strlen($value)) . $name . $value;
        }
        $request = self::record(self::BEGIN_REQUEST, pack('nCx5', self::RESPONDER, 0))
            . self::record(self::PARAMS, $encoded)
            . self::record(self::PARAMS, '')
            . self::record(self::STDIN, '');
        fwrite($socket, $request);
        return $socket;
    }

    /**
     * @param resource $socket from send()
     * @return array{headers: string, body: string, stderr: string}
     */
    public static function receive($socket): array
    {
        $stdout = '';
        $stderr = '';
        while (true) {
            $header = self::read($socket, 8);
            $fields = unpack('Cversion/Ctype/nid/nlength/Cpadding/Creserved', $header);
            $content = self::read($socket, $fields['length']);
            self::read($socket, $fields['padding']);
            if ($fields['type'] === self::STDOUT) {
                $stdout .= $content;
            } elseif ($fields['type'] === self::STDERR) {
                $stderr .= $content;
            } elseif ($fields['type'] === self::END_REQUEST) {
                break;
            }
        }
        fclose($socket);
        [$headers, $body] = array_pad(explode("\r\n\r\n", $stdout, 2), 2, '');
        return ['headers' => $headers, 'body' => $body, 'stderr' => $stderr];
    }

    private static function record(int $type, string $content): string
    {
        return pack('CCnnCx', 1, $type, 1, strlen($content), 0) . $content;
    }

    private static function length(int $length): string
    {
        return $length < 128 ? chr($length) : pack('N', $length | 0x80000000);
    }

    /** @param resource $socket */
    private static function read($socket, int $bytes): string
    {
        $data = '';
        while (strlen($data) < $bytes) {
            $chunk = fread($socket, $bytes - strlen($data));
            if ($chunk === false || $chunk === '') {
                $meta = stream_get_meta_data($socket);
                throw new \RuntimeException($meta['timed_out'] ? 'php-fpm did not answer in time'
                    : 'php-fpm closed the connection');
            }
            $data .= $chunk;
        }
        return $data;
    }
}

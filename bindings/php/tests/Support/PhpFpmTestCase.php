<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

use Leasehold\Library;

/**
 * The README's php-fpm set-ups, run for real: Debian's php-fpm with ffi.enable=preload and opcache.preload =
 * bindings/php/preload.php, on a free loopback port, answering FastCGI requests for examples/php/fpm-lock.php,
 * which takes its lock through the preloaded FFI scope (FFI::cdef is refused at request time there).
 * Each concrete class is one way of registering the scope.
 */
abstract class PhpFpmTestCase extends LeaseholdTestCase
{
    private static ?TempDir $dir = null;
    /** @var resource|null */
    private static $fpm = null;
    private static int $port = 0;
    private static string $url = '';
    /** Where php-fpm finds the workspace: this checkout, or a copy another user can read. */
    private static string $root = '';
    private static string $library = '';

    /**
     * The php.ini lines of this set-up, beyond opcache.enable, ffi.enable and opcache.preload.
     *
     * @return list<string>
     */
    abstract protected static function iniLines(TempDir $dir): array;

    /** The user php-fpm's master runs as (null: this process's user). */
    abstract protected static function masterUser(): ?string;

    /** The file opcache.preload names: the package's preload.php unless a set-up chains it from its own. */
    protected static function preloadScript(TempDir $dir, string $root): string
    {
        return $root . '/bindings/php/preload.php';
    }

    /** A script of this set-up's own under the temp dir, readable by php-fpm's workers. */
    protected static function writeScript(string $name, string $code): string
    {
        $file = (string) self::$dir?->file($name);
        file_put_contents($file, $code);
        chmod($file, 0644);
        return $file;
    }

    /** @return array{headers: string, body: string, stderr: string} */
    protected static function get(string $script, string $query = ''): array
    {
        return FastCgi::get('tcp://127.0.0.1:' . self::$port, $script, $query);
    }

    public static function setUpBeforeClass(): void
    {
        self::$dir = new TempDir('fpm');
        $dir = self::$dir;
        $user = static::masterUser();
        $root = posix_geteuid() === 0 && $user === null;
        if ($user !== null) {
            // The master's user must reach the temp dir (configs, logs, the local backend's lock files), and may
            // not be able to read this checkout (CI clones it anywhere): it gets a copy of what it runs.
            chmod($dir->path, 0777);
            self::copyWorkspace($dir->file('tree'));
        } else {
            self::$root = dirname(__DIR__, 4);
            self::$library = Library::defaultPath();
        }
        self::$url = 'file://' . $dir->file('locks');
        self::$port = Ports::free();
        $self = (string) (posix_getpwuid(posix_geteuid())['name'] ?? 'root');
        $group = (string) (posix_getgrgid(posix_getegid())['name'] ?? 'root');

        file_put_contents($dir->file('php.ini'), implode("\n", array_merge([
            'opcache.enable=1',
            'ffi.enable=preload',
            'opcache.preload=' . static::preloadScript($dir, self::$root),
            'display_errors=stderr',
            'log_errors=1',
            'error_log=' . $dir->file('php-errors.log'),
        ], static::iniLines($dir), [''])));
        file_put_contents($dir->file('php-fpm.conf'), implode("\n", [
            '[global]',
            'pid = ' . $dir->file('php-fpm.pid'),
            'error_log = ' . $dir->file('php-fpm.log'),
            'daemonize = no',
            '[leasehold]',
            $root ? "user = $self" : '',
            $root ? "group = $group" : '',
            'listen = 127.0.0.1:' . self::$port,
            'pm = static',
            'pm.max_children = 2',
            'clear_env = no',
            'catch_workers_output = yes',
            '',
        ]));

        $command = [PhpFpm::binary(), '--nodaemonize', '--fpm-config', $dir->file('php-fpm.conf'),
            '-c', $dir->file('php.ini')];
        if ($root) {
            $command[] = '--allow-to-run-as-root';
        }
        if ($user !== null) {
            $gid = (int) (posix_getpwnam($user)['gid'] ?? 65534);
            $command = array_merge(['setpriv', "--reuid=$user", "--regid=$gid", '--clear-groups'], $command);
        }
        $env = array_merge(getenv(), [
            'LEASEHOLD_LIBRARY' => self::$library,
            'LEASEHOLD_URL' => self::$url,
        ]);
        self::$fpm = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $dir->file('stdout'), 'w'],
            2 => ['file', $dir->file('stderr'), 'w']], $pipes, null, $env);
        if (self::$fpm === false) {
            self::$fpm = null;
            throw new \RuntimeException('cannot start php-fpm');
        }
        $deadline = microtime(true) + 20.0;
        while (!Ports::answers(self::$port)) {
            if (microtime(true) > $deadline || !proc_get_status(self::$fpm)['running']) {
                throw new \RuntimeException("php-fpm did not start:\n" . self::logs());
            }
            usleep(50_000);
        }
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$fpm !== null) {
            PhpFpm::stop(self::$fpm);
            self::$fpm = null;
        }
        self::$dir = null;
    }

    public function testARequestTakesALockThroughThePreloadedScope(): void
    {
        $previous = 0;
        for ($i = 0; $i < 3; $i++) {
            $response = $this->request('date=2026-11-29');
            self::assertStringContainsString('application/json', $response['headers'], self::logs());
            $json = json_decode($response['body'], true);
            self::assertIsArray($json, $response['headers'] . $response['body'] . $response['stderr'] . self::logs());
            self::assertSame('report:2026-11-29', $json['key']);
            self::assertTrue($json['preloaded'], 'the endpoint must use the FFI scope that preload.php registered');
            self::assertGreaterThan($previous, $json['fence']);
            self::assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $json['token']);
            self::assertGreaterThan(5.0, $json['remaining']);
            $previous = $json['fence'];
        }
    }

    public function testTwoRequestsExcludeEachOther(): void
    {
        $address = 'tcp://127.0.0.1:' . self::$port;
        $script = self::$root . '/examples/php/fpm-lock.php';
        $holder = FastCgi::send($address, $script, 'date=2026-11-30&work=4');
        usleep(1_000_000); // the first request is under the lock by now (static pool: an idle worker takes it)
        $refused = FastCgi::get($address, $script, 'date=2026-11-30');
        self::assertStringContainsString('Status: 409', $refused['headers'], $refused['body'] . self::logs());
        $held = FastCgi::receive($holder);
        $json = json_decode($held['body'], true);
        self::assertIsArray($json, $held['headers'] . $held['body'] . self::logs());
        self::assertSame('report:2026-11-30', $json['key']);
        $after = json_decode($this->request('date=2026-11-30')['body'], true);
        self::assertIsArray($after, self::logs());
        self::assertGreaterThan($json['fence'], $after['fence']);
    }

    public function testAPersistentClientOutlivesRequestsAndServesMetrics(): void
    {
        $address = 'tcp://127.0.0.1:' . self::$port;
        $script = self::$root . '/examples/php/metrics.php';
        $byWorker = [];
        for ($i = 0; $i < 6; $i++) {
            $response = FastCgi::get($address, $script, 'page=report&date=2026-12-0' . ($i + 1));
            $json = json_decode($response['body'], true);
            self::assertIsArray($json, $response['headers'] . $response['body'] . self::logs());
            $byWorker[$json['pid']][] = $json['worker_acquired'];
        }
        // Each worker's one client counted every request that worker served: 1, 2, 3, … whichever worker took
        // which request. A client per request would say 1 every time.
        foreach ($byWorker as $pid => $counts) {
            self::assertSame(range(1, count($counts)), $counts, "worker $pid");
        }
        $metrics = FastCgi::get($address, $script, 'page=metrics');
        self::assertStringContainsString('text/plain; version=0.0.4', $metrics['headers'], self::logs());
        self::assertMatchesRegularExpression(
            '/^leasehold_acquired_total\{backend="local",prefix="leasehold:"\} [1-6]$/m', $metrics['body']);
    }

    public function testFfiCdefIsRefusedAtRequestTimeSoThePreloadIsWhatMakesItWork(): void
    {
        $script = (string) self::$dir?->file('cdef.php');
        file_put_contents($script, <<<'PHP'
            <?php
            try { FFI::cdef('int abs(int);'); echo 'cdef allowed'; } catch (Throwable $e) { echo 'cdef refused'; }
            PHP);
        chmod($script, 0644);
        $response = FastCgi::get('tcp://127.0.0.1:' . self::$port, $script);
        self::assertSame('cdef refused', $response['body'], self::logs());
    }

    /** @return array{headers: string, body: string, stderr: string} */
    private function request(string $query): array
    {
        $script = self::$root . '/examples/php/fpm-lock.php';
        return FastCgi::get('tcp://127.0.0.1:' . self::$port, $script, $query);
    }

    /** Copies the package, the php-fpm example and the library under $tree, readable by everyone. */
    private static function copyWorkspace(string $tree): void
    {
        $source = dirname(__DIR__, 4);
        $files = ['examples/php/fpm-lock.php', 'examples/php/metrics.php', 'bindings/php/preload.php',
            'bindings/php/autoload.php'];
        foreach (['bindings/php/src', 'bindings/php/resources'] as $folder) {
            $iterator = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator("$source/$folder",
                \FilesystemIterator::SKIP_DOTS));
            foreach ($iterator as $file) {
                $files[] = substr((string) $file, strlen($source) + 1);
            }
        }
        foreach ($files as $file) {
            self::copy("$source/$file", "$tree/$file");
        }
        self::$root = $tree;
        self::$library = "$tree/lib/" . basename(Library::defaultPath());
        self::copy(Library::defaultPath(), self::$library);
    }

    private static function copy(string $from, string $to): void
    {
        if (!is_dir(dirname($to))) {
            mkdir(dirname($to), 0755, true);
        }
        if (!copy($from, $to)) {
            throw new \RuntimeException("cannot copy $from to $to");
        }
        chmod($to, 0755);
    }

    protected static function logs(): string
    {
        $out = '';
        foreach (['php-fpm.log', 'php-errors.log', 'stdout', 'stderr'] as $name) {
            $file = self::$dir?->file($name);
            if ($file !== null && is_file($file)) {
                $out .= "\n--- $name ---\n" . file_get_contents($file);
            }
        }
        return $out;
    }
}

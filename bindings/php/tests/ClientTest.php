<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\InternalException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\LibraryException;
use Leasehold\Exception\LockLostException;
use Leasehold\Exception\LockTimeoutException;
use Leasehold\Library;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\TempDir;

/** Connecting, loading the library, and the exception hierarchy: what does not depend on a backend. */
final class ClientTest extends LeaseholdTestCase
{
    /** Bad URLs are InvalidArgumentException, with a message that says what is wrong. */
    public function testBadUrlsAreInvalidArguments(): void
    {
        $dir = new TempDir('urls');
        $bad = [
            'empty' => '',
            'not a url' => 'not a url',
            'unknown scheme' => 'ftp://127.0.0.1/locks',
            'unknown parameter' => 'file://' . $dir->path . '?colour=blue',
            'bad port' => 'redis://127.0.0.1:99999',
            'port not a number' => 'redis://127.0.0.1:port',
            'relative file path' => 'file://relative/dir',
            'NUL byte' => "file://{$dir->path}\0/x",
            'bad timeout' => 'file://' . $dir->path . '?connect_timeout_ms=soon',
        ];
        foreach ($bad as $what => $url) {
            try {
                Client::connect($url);
                self::fail("$what was accepted: $url");
            } catch (InvalidArgumentException $e) {
                self::assertSame($what === 'NUL byte' ? 0 : 4, $e->getCode(), $what);
                if ($what !== 'NUL byte') {
                    // The library's own message (leasehold_last_error()), not a generic one.
                    self::assertStringStartsWith('leasehold_client_open: invalid argument: ', $e->getMessage());
                }
            }
        }
    }

    public function testAnUnknownParameterErrorNamesTheAcceptedOnes(): void
    {
        $dir = new TempDir('param');
        try {
            Client::connect('file://' . $dir->path . '?colour=blue');
            self::fail('an unknown parameter must be refused');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('colour', $e->getMessage());
            self::assertStringContainsString('prefix', $e->getMessage());
        }
    }

    public function testExceptionsFormTheDocumentedHierarchy(): void
    {
        foreach ([
            LockLostException::class => \RuntimeException::class,
            LockTimeoutException::class => \RuntimeException::class,
            BackendUnavailableException::class => \RuntimeException::class,
            InternalException::class => \RuntimeException::class,
            LibraryException::class => \RuntimeException::class,
            InvalidArgumentException::class => \InvalidArgumentException::class,
        ] as $class => $parent) {
            $e = new $class('m');
            self::assertInstanceOf(LeaseholdException::class, $e, $class);
            self::assertInstanceOf($parent, $e, $class);
        }
    }

    public function testLibraryErrorsMapEveryStatus(): void
    {
        $library = Library::load();
        self::assertInstanceOf(LockLostException::class, $library->error(Library::LOST, 'x'));
        self::assertInstanceOf(BackendUnavailableException::class, $library->error(Library::UNAVAILABLE, 'x'));
        self::assertInstanceOf(InvalidArgumentException::class, $library->error(Library::INVALID_ARGUMENT, 'x'));
        self::assertInstanceOf(InternalException::class, $library->error(Library::INTERNAL, 'x'));
        self::assertInstanceOf(InternalException::class, $library->error(99, 'x'));
        self::assertSame(2, $library->error(Library::LOST, 'x')->getCode());
    }

    public function testTheLibraryIsLoadedOncePerProcess(): void
    {
        self::assertSame(Library::load(), Library::load());
        self::assertSame(Library::load(Library::defaultPath()), Library::load());
        self::assertFalse(Library::load()->isPreloaded(), 'the CLI test run binds the file, it preloads nothing');
        self::assertSame(Library::defaultPath(), Library::load()->path());
        $dir = new TempDir('lib');
        $client = Client::connect('file://' . $dir->path);
        self::assertSame(Library::load(), $client->library());
        self::assertSame(Library::load()->version(), $client->version());
    }

    public function testAnExplicitLibraryPathThatDoesNotExistIsALibraryException(): void
    {
        try {
            Client::connect('file:///tmp/leasehold', '/nonexistent/libleasehold.so');
            self::fail('a missing library must throw');
        } catch (LibraryException $e) {
            self::assertStringContainsString('/nonexistent/libleasehold.so', $e->getMessage());
            self::assertStringContainsString('cargo build --release -p leasehold-ffi', $e->getMessage());
        }
    }

    public function testAFileThatIsNotTheLibraryIsALibraryException(): void
    {
        $this->expectException(LibraryException::class);
        Client::connect('file:///tmp/leasehold', __FILE__);
    }

    public function testLeaseholdLibraryEnvironmentVariableChoosesTheFile(): void
    {
        $script = <<<'PHP'
            <?php
            require $argv[1];
            try {
                Leasehold\Client::connect('file://' . $argv[2]);
                echo "connected\n";
            } catch (Leasehold\Exception\LibraryException $e) {
                echo $e->getMessage(), "\n";
            }
            PHP;
        $dir = new TempDir('env');
        file_put_contents($dir->file('probe.php'), $script);
        $autoload = dirname(__DIR__) . '/autoload.php';

        $locks = $dir->file('locks');
        $missing = Php::run($dir->file('probe.php'), [$autoload, $locks],
            ['LEASEHOLD_LIBRARY' => '/nowhere/libleasehold.so']);
        self::assertStringContainsString('/nowhere/libleasehold.so', $missing['stdout'], $missing['stderr']);

        $real = Php::run($dir->file('probe.php'), [$autoload, $locks],
            ['LEASEHOLD_LIBRARY' => Library::defaultPath()]);
        self::assertSame("connected\n", $real['stdout'], $real['stderr']);
    }

    public function testAClientCannotBeCloned(): void
    {
        $dir = new TempDir('clone');
        $client = Client::connect('file://' . $dir->path);
        $this->expectException(\Error::class);
        $copy = clone $client;
    }

    public function testPreloadHeaderNamesScopeAndLibrary(): void
    {
        $header = Library::preloadHeader('/opt/lib/libleasehold.so');
        self::assertStringStartsWith("#define FFI_SCOPE \"LEASEHOLD\"\n#define FFI_LIB \"/opt/lib/libleasehold.so\"\n",
            $header);
        self::assertStringContainsString('leasehold_lease_release', $header);
        $this->expectException(LibraryException::class);
        Library::preloadHeader("/bad\"path");
    }
}

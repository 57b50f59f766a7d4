<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\LibraryException;
use Leasehold\Library;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * A PHP package and a library of different versions must not run together silently: Client::connect() refuses a
 * library of another ABI major or an older minor, and says which versions met. The mismatched libraries are
 * small shared objects built here with the C compiler, exporting what a real one of that version would.
 */
final class AbiTest extends LeaseholdTestCase
{
    /** @var list<TempDir> kept until the test ends: a directory is removed when its object goes */
    private array $dirs = [];

    public function testTheRealLibrarySpeaksThisPackagesAbi(): void
    {
        $library = Library::load();
        self::assertSame(Library::VERSION, $library->version());
        self::assertSame(Library::ABI_VERSION, (int) $library->ffi()->leasehold_abi_version());
    }

    public function testALibraryOfAnotherMajorIsRefusedAtConnectNamingBothVersions(): void
    {
        $message = $this->connectWith($this->fakeLibrary('1.0.0', 1000));
        self::assertStringContainsString('libleasehold 1.0.0', $message);
        self::assertStringContainsString('ABI 1.0', $message);
        self::assertStringContainsString('PHP package ' . Library::VERSION, $message);
        self::assertStringContainsString('needs ABI ' . self::abi(Library::ABI_VERSION), $message);
    }

    public function testALibraryOfAnOlderMinorIsRefused(): void
    {
        // 0.2 had no leasehold_abi_version at all.
        $message = $this->connectWith($this->fakeLibrary('0.2.0', null));
        self::assertStringContainsString('libleasehold 0.2.0', $message);
        self::assertStringContainsString('a library before 0.3', $message);
        self::assertStringContainsString('needs ABI ' . self::abi(Library::ABI_VERSION), $message);
    }

    public function testTheRuleAcceptsANewerMinorOfTheSameMajorOnly(): void
    {
        // This package's own ABI, and any newer minor of the same major.
        $ours = Library::ABI_VERSION;
        Library::refuseIncompatible('x', 'v', $ours);
        Library::refuseIncompatible('x', '0.9.1', 9);
        foreach ([$ours - 1, $ours + 1000, $ours + 2000, 0] as $abi) {
            try {
                Library::refuseIncompatible('x', 'v', $abi);
                self::fail("ABI $abi must be refused");
            } catch (LibraryException $e) {
                self::assertStringContainsString(sprintf('ABI %d.%d', intdiv($abi, 1000), $abi % 1000),
                    $e->getMessage());
            }
        }
    }

    private function connectWith(string $library): string
    {
        $dir = new TempDir('abi-locks');
        try {
            Client::connect('file://' . $dir->path, $library);
        } catch (LibraryException $e) {
            return $e->getMessage();
        }
        self::fail("a library of another ABI must be refused: $library");
    }

    private function fakeLibrary(string $version, ?int $abi): string
    {
        $dir = $this->dirs[] = new TempDir('abi');
        $source = sprintf('const char *leasehold_version(void) { return "%s"; }' . "\n", $version);
        if ($abi !== null) {
            $source .= sprintf('unsigned leasehold_abi_version(void) { return %du; }' . "\n", $abi);
        }
        file_put_contents($dir->file('fake.c'), $source);
        $library = $dir->file("libleasehold-$version.so");
        exec(sprintf('cc -shared -fPIC -o %s %s 2>&1', escapeshellarg($library), escapeshellarg($dir->file('fake.c'))),
            $output, $status);
        self::assertSame(0, $status, 'cc: ' . implode("\n", $output));
        return $library;
    }

    /** `major.minor` of an ABI number (`major * 1000 + minor`). */
    private static function abi(int $abi): string
    {
        return sprintf('%d.%d', intdiv($abi, 1000), $abi % 1000);
    }
}

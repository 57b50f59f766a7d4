<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Tests\Support\PhpFpmTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * The README's recipe for a pool that already has an opcache.preload file: a preload file of the operator's own
 * requires the application's existing one and Leasehold's, so neither takes the other's place. Every request then
 * sees both: the application's preloaded code and Leasehold's FFI scope.
 */
final class PhpFpmChainedPreloadTest extends PhpFpmTestCase
{
    protected static function iniLines(TempDir $dir): array
    {
        return [];
    }

    protected static function masterUser(): ?string
    {
        // As root, php-fpm would need opcache.preload_user, under which FFI::load() is refused (see the ffi.preload
        // variant); the suite drops to "nobody" as an unprivileged operator's pool runs.
        return posix_geteuid() === 0 ? 'nobody' : null;
    }

    protected static function preloadScript(TempDir $dir, string $root): string
    {
        $app = $dir->file('app-preload.php');
        file_put_contents($app, "<?php\nfunction app_preloaded(): string { return 'app code preloaded'; }\n");
        chmod($app, 0644);
        $chain = $dir->file('preload-chain.php');
        file_put_contents($chain, sprintf("<?php\nrequire %s;\nrequire %s;\n", var_export($app, true),
            var_export($root . '/bindings/php/preload.php', true)));
        chmod($chain, 0644);
        return $chain;
    }

    public function testTheApplicationsPreloadStillRuns(): void
    {
        $script = self::writeScript('app.php', <<<'PHP'
            <?php
            echo function_exists('app_preloaded') ? app_preloaded() : 'app code missing';
            PHP);
        $response = self::get($script);
        self::assertSame('app code preloaded', $response['body'], self::logs());
    }
}

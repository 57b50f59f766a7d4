<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * Loads the frameworks the adapters plug into from Debian's packages (php-symfony-lock, -semaphore, -console,
 * -messenger, php-laravel-framework: /usr/share/php, on PHP's include_path), without Composer. A missing framework fails the test, never skips it.
 */
final class Frameworks
{
    public static function symfonyLock(): void
    {
        self::load('Symfony/Component/Lock/autoload.php', 'php-symfony-lock', \Symfony\Component\Lock\Key::class);
    }

    public static function symfonySemaphore(): void
    {
        self::load('Symfony/Component/Semaphore/autoload.php', 'php-symfony-semaphore',
            \Symfony\Component\Semaphore\Key::class);
    }

    /** Console and Messenger, with symfony/lock beside them (the command and the handler lock through it). */
    public static function symfonyConsoleAndMessenger(): void
    {
        self::symfonyLock();
        self::load('Symfony/Component/Console/autoload.php', 'php-symfony-console',
            \Symfony\Component\Console\Application::class);
        self::load('Symfony/Component/Messenger/autoload.php', 'php-symfony-messenger',
            \Symfony\Component\Messenger\MessageBus::class);
    }

    public static function laravel(): void
    {
        self::load('Illuminate/autoload.php', 'php-laravel-framework', \Illuminate\Cache\CacheManager::class);
    }

    private static function load(string $autoload, string $package, string $probe): void
    {
        if (class_exists($probe)) {
            return;
        }
        $file = stream_resolve_include_path($autoload) ?: '/usr/share/php/' . $autoload;
        if (!is_file($file)) {
            throw new \RuntimeException("$autoload not found: apt-get install $package (the suite does not skip "
                . 'the adapter tests)');
        }
        require_once $file;
    }
}

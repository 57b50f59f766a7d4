<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

use Illuminate\Contracts\Console\Kernel as ConsoleKernelContract;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Foundation\Application;
use Illuminate\Foundation\Bootstrap\BootProviders;
use Illuminate\Foundation\Bootstrap\LoadConfiguration;
use Illuminate\Foundation\Bootstrap\RegisterFacades;
use Illuminate\Foundation\Bootstrap\RegisterProviders;
use Illuminate\Foundation\Exceptions\Handler;
use Illuminate\Support\Carbon;
use Leasehold\Laravel\LeaseholdServiceProvider;
use Leasehold\Tests\Laravel\Application\ConsoleKernel;

/**
 * A real Laravel application (Illuminate\Foundation\Application) in a temp dir: config/*.php, an `artisan` script,
 * storage. Its default cache store is `leasehold` wrapping the `file` store, with a cache.prefix; its queue is
 * Redis. Workers and schedulers run as separate `php artisan …` processes, as in production.
 */
final class LaravelApplication
{
    public const PREFIX = 'leasehold_app_cache_';

    private function __construct(public readonly string $basePath, private readonly TempDir $dir)
    {
    }

    /** Writes the application: its configuration points at the Leasehold $url and the redis-server on $redisPort. */
    public static function create(string $url, int $redisPort): self
    {
        $dir = new TempDir('laravel-app');
        $base = $dir->path;
        foreach (['config', 'bootstrap/cache', 'storage/framework/cache/data', 'storage/logs', 'run'] as $sub) {
            if (!is_dir("$base/$sub")) {
                mkdir("$base/$sub", 0777, true);
            }
        }
        $config = [
            'app' => [
                'name' => 'leasehold-test', 'env' => 'testing', 'debug' => true, 'timezone' => 'UTC',
                'key' => 'base64:' . base64_encode(random_bytes(32)), 'cipher' => 'AES-256-CBC',
                'providers' => [
                    \Illuminate\Bus\BusServiceProvider::class,
                    \Illuminate\Cache\CacheServiceProvider::class,
                    \Illuminate\Database\DatabaseServiceProvider::class,
                    \Illuminate\Filesystem\FilesystemServiceProvider::class,
                    \Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
                    \Illuminate\Queue\QueueServiceProvider::class,
                    \Illuminate\Redis\RedisServiceProvider::class,
                    LeaseholdServiceProvider::class,
                    \Leasehold\Tests\Laravel\Application\StartGate::class,
                ],
                'aliases' => [],
            ],
            'cache' => [
                'default' => 'leasehold',
                'prefix' => self::PREFIX,
                'stores' => [
                    'leasehold' => ['driver' => 'leasehold', 'store' => 'file', 'url' => $url, 'keepalive_ttl' => 1.5],
                    'file' => ['driver' => 'file', 'path' => "$base/storage/framework/cache/data"],
                ],
            ],
            'queue' => [
                'default' => 'redis',
                'connections' => [
                    'redis' => ['driver' => 'redis', 'connection' => 'default', 'queue' => 'default',
                        'retry_after' => 60, 'block_for' => null],
                ],
                'failed' => ['driver' => 'null'],
            ],
            'database' => [
                // Artisan's migration commands need a connection; nothing here uses it.
                'default' => 'sqlite',
                'connections' => ['sqlite' => ['driver' => 'sqlite', 'database' => ':memory:', 'prefix' => '']],
                'migrations' => 'migrations',
                'redis' => [
                    'client' => 'phpredis',
                    'options' => ['prefix' => 'leasehold-app-' . bin2hex(random_bytes(4)) . ':'],
                    'default' => ['host' => '127.0.0.1', 'port' => $redisPort, 'database' => 0],
                ],
            ],
            'logging' => [
                'default' => 'stderr',
                'channels' => ['stderr' => ['driver' => 'monolog', 'handler' => \Monolog\Handler\StreamHandler::class,
                    'with' => ['stream' => 'php://stderr']]],
            ],
        ];
        foreach ($config as $name => $values) {
            file_put_contents("$base/config/$name.php", '<?php return ' . var_export($values, true) . ";\n");
        }
        $bootstrap = var_export(dirname(__DIR__) . '/bootstrap.php', true);
        file_put_contents("$base/artisan", <<<PHP
            <?php
            // The application's artisan, as in a Laravel project: the console kernel handles the command line.
            require $bootstrap;
            \$app = Leasehold\\Tests\\Support\\LaravelApplication::application(__DIR__);
            \$kernel = \$app->make(Illuminate\\Contracts\\Console\\Kernel::class);
            \$status = \$kernel->handle(\$input = new Symfony\\Component\\Console\\Input\\ArgvInput(),
                new Symfony\\Component\\Console\\Output\\ConsoleOutput());
            \$kernel->terminate(\$input, \$status);
            exit(\$status);

            PHP);
        return new self($base, $dir);
    }

    /**
     * The application at $basePath with its kernels bound, not yet bootstrapped (what bootstrap/app.php makes).
     * LEASEHOLD_TEST_NOW fixes the scheduler's clock, so that schedulers started together see the same minute.
     */
    public static function application(string $basePath): Application
    {
        Frameworks::laravel();
        $now = getenv('LEASEHOLD_TEST_NOW');
        if (is_string($now) && $now !== '') {
            Carbon::setTestNow(Carbon::parse($now));
        }
        $app = new Application($basePath);
        $app->singleton(ConsoleKernelContract::class, ConsoleKernel::class);
        $app->singleton(ExceptionHandler::class, Handler::class);
        return $app;
    }

    /**
     * The application booted in this process (config, facades, providers), without Laravel's error handlers,
     * which would replace PHPUnit's.
     */
    public function boot(): Application
    {
        $app = self::application($this->basePath);
        $app->bootstrapWith([
            LoadConfiguration::class,
            RegisterFacades::class,
            RegisterProviders::class,
            BootProviders::class,
        ]);
        \Illuminate\Support\Facades\Facade::clearResolvedInstances();
        \Illuminate\Support\Facades\Facade::setFacadeApplication($app);
        return $app;
    }

    /**
     * Starts `php artisan $arguments` in the application's directory; pair with Php::finish().
     *
     * @param list<string>          $arguments
     * @param array<string, string> $env
     */
    public function artisan(array $arguments, array $env = []): array
    {
        $previous = getcwd();
        chdir($this->basePath);
        try {
            return Php::start($this->basePath . '/artisan', $arguments, $env + ['LEASEHOLD_APP_RUN' => $this->run('')]);
        } finally {
            chdir((string) $previous);
        }
    }

    /** A file under the application's run/ directory, where the test jobs and commands record what they did. */
    public function run(string $name): string
    {
        return $this->basePath . '/run/' . $name;
    }
}

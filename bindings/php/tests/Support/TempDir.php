<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/**
 * A private directory under the system temp dir (or under $base), removed with its contents when the object goes
 * away.
 */
final class TempDir
{
    public readonly string $path;
    private int $ownerPid;

    public function __construct(string $label, ?string $base = null)
    {
        $base = ($base ?? sys_get_temp_dir()) . '/leasehold-php-' . $label . '-' . getmypid() . '-'
            . bin2hex(random_bytes(4));
        if (!mkdir($base, 0700, true)) {
            throw new \RuntimeException("cannot create $base");
        }
        $this->path = $base;
        $this->ownerPid = getmypid();
    }

    public function file(string $name): string
    {
        return $this->path . '/' . $name;
    }

    public function __destruct()
    {
        // A forked child must not delete what its parent still uses.
        if (getmypid() === $this->ownerPid) {
            self::remove($this->path);
        }
    }

    private static function remove(string $path): void
    {
        if (is_dir($path) && !is_link($path)) {
            foreach (scandir($path) ?: [] as $entry) {
                if ($entry !== '.' && $entry !== '..') {
                    self::remove($path . '/' . $entry);
                }
            }
            @rmdir($path);
        } else {
            @unlink($path);
        }
    }
}

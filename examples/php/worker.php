<?php

declare(strict_types=1);

/*
 * A report worker: takes the lock "report:<date>", builds the report, and writes it through a FENCED update, so
 * that a worker whose lease ran out (a long pause, a slow disk) can never overwrite a newer holder's result.
 *
 *   LEASEHOLD_URL=file:///tmp/leasehold php examples/php/worker.php --date=2026-11-29 --ttl=5
 *
 * Options: --date=Y-m-d (today), --ttl=seconds (5), --wait=seconds to wait for the lock (30), --work=seconds of
 * work (0.5), --stall=seconds of extra pause that the worker does NOT plan for (0; make it longer than --ttl to
 * see the fence reject a stale write), --db=path of the SQLite file, --name=label for the output.
 * Needs PHP's pdo_sqlite (Debian: apt-get install php-sqlite3).
 */

use Leasehold\Client;
use Leasehold\Exception\LockLostException;

$autoload = [__DIR__ . '/../../bindings/php/vendor/autoload.php', __DIR__ . '/../../bindings/php/autoload.php'];
foreach ($autoload as $file) {
    if (is_file($file)) {
        require $file;
        break;
    }
}

$options = getopt('', ['date:', 'ttl:', 'wait:', 'work:', 'stall:', 'db:', 'name:']);
$date = (string) ($options['date'] ?? date('Y-m-d'));
$ttl = (float) ($options['ttl'] ?? 5.0);
$wait = (float) ($options['wait'] ?? 30.0);
$work = (float) ($options['work'] ?? 0.5);
$stall = (float) ($options['stall'] ?? 0.0);
$db = (string) ($options['db'] ?? sys_get_temp_dir() . '/leasehold-reports.sqlite');
$name = (string) ($options['name'] ?? 'worker-' . getmypid());
$url = getenv('LEASEHOLD_URL') ?: 'file://' . sys_get_temp_dir() . '/leasehold';

function say(string $name, string $message): void
{
    echo DateTimeImmutable::createFromFormat('U.u', sprintf('%.6F', microtime(true)))->format('H:i:s.v'),
        "  $name  $message\n";
}

$pdo = new PDO('sqlite:' . $db, null, null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
    PDO::ATTR_TIMEOUT => 30, // workers share the file: wait for SQLite's write lock instead of failing
]);
// `fence` is the fence of the last accepted write. The store, not the lock, has the final word on staleness.
$pdo->exec('CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    body TEXT,
    fence INTEGER NOT NULL DEFAULT 0,
    written_by TEXT
)');

$client = Client::connect($url);
$lock = $client->createLock("report:$date", ttl: $ttl);

if (!$lock->acquire(wait: $wait)) {
    say($name, "gave up: report:$date was busy for {$wait} s");
    exit(0);
}
try {
    $fence = $lock->fence();
    say($name, sprintf('took report:%s  fence %d  ttl %.1f s', $date, $fence, $ttl));

    usleep((int) (($work + $stall) * 1e6)); // the work, plus a pause nobody planned for
    $body = sprintf('report for %s built by %s with fence %d', $date, $name, $fence);

    $pdo->prepare('INSERT OR IGNORE INTO reports (id, fence) VALUES (:id, 0)')->execute(['id' => $date]);
    $update = $pdo->prepare(
        'UPDATE reports SET body = :body, written_by = :worker, fence = :fence WHERE id = :id AND fence < :fence'
    );
    $update->execute(['body' => $body, 'worker' => $name, 'fence' => $fence, 'id' => $date]);
    if ($update->rowCount() === 1) {
        say($name, "wrote the report with fence $fence");
    } else {
        $current = $pdo->query('SELECT fence FROM reports WHERE id = ' . $pdo->quote($date))->fetchColumn();
        say($name, "REJECTED stale write: fence $fence, but the store already has fence $current");
    }
} finally {
    try {
        $lock->release();
        say($name, 'released');
    } catch (LockLostException $e) {
        say($name, 'lease had expired before release (LockLostException): the fence kept the store safe');
    }
}

<?php

declare(strict_types=1);

/*
 * The request that benchmarks/fpm.php sends to its php-fpm pool (one worker, Leasehold preloaded). It answers JSON.
 *
 *   ?n=<request number>&memory=1   the worker's first request: VmRSS before Leasehold is touched, one lock taken
 *                                  and released with a persistent client, VmRSS again
 *   ?n=<request number>            a later request: its first lock (createLock + tryAcquire + release, fresh key),
 *                                  then a second one, then a third after a 1 ms pause, timed apart; VmRSS at the
 *                                  end
 *
 * Classes come from the preload; the request does no autoloading, as in the recommended deployment.
 */

use Leasehold\Client;

/**
 * The worker's own memory, in kB, as the kernel counts it now. Plain string functions: a first preg_match() would
 * page in PCRE and count it against Leasehold.
 */
function rss(): array
{
    $fields = ['VmRSS' => 0, 'RssAnon' => 0, 'RssFile' => 0, 'RssShmem' => 0];
    foreach (explode("\n", (string) file_get_contents('/proc/self/status')) as $line) {
        $name = strstr($line, ':', true);
        if ($name !== false && isset($fields[$name])) {
            $fields[$name] = (int) trim(substr($line, strlen($name) + 1));
        }
    }
    return $fields;
}

/** One lock cycle on a fresh key, in ns, creating the Lock object included (a request makes its own). */
function cycle(Client $client, string $key): int
{
    $start = hrtime(true);
    $lock = $client->createLock($key, 30.0);
    if (!$lock->tryAcquire()) {
        throw new RuntimeException("$key is held: the benchmark's keys must be fresh");
    }
    $lock->release();
    unset($lock);
    return hrtime(true) - $start;
}

// Read before anything else, so that the figure is the worker as the request found it; the first read pages in
// what reading costs, the second is the figure.
$memory = ($_GET['memory'] ?? '') === '1';
if ($memory) {
    rss();
}
$before = $memory ? rss() : null;
$n = (int) ($_GET['n'] ?? 0);

header('Content-Type: application/json');
if (!class_exists(Client::class, false)) {
    http_response_code(500);
    echo json_encode(['error' => 'Leasehold\Client is not preloaded: opcache.preload did not run preload.php']);
    return;
}
$url = (string) getenv('LEASEHOLD_URL');
$start = hrtime(true);
$client = Client::connect($url, persistent: true);
$connect = hrtime(true) - $start;
$first = cycle($client, "fpmbench:$n:first");
$warm = $memory ? null : cycle($client, "fpmbench:$n:warm");
// For comparison: a lock after a short pause in the same request, as the first one comes after the wait for it.
if (!$memory) {
    usleep(1000);
}
$paused = $memory ? null : cycle($client, "fpmbench:$n:paused");
echo json_encode([
    'pid' => getmypid(),
    'preloaded' => $client->library()->isPreloaded(),
    'version' => $client->version(),
    'connect_ns' => $connect,
    'first_ns' => $first,
    'warm_ns' => $warm,
    'paused_ns' => $paused,
    'before' => $before,
    'after' => rss(),
]);

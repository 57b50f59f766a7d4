<?php

declare(strict_types=1);

/*
 * A php-fpm endpoint that takes "report:<date>" for the length of a request, through the FFI scope that
 * bindings/php/preload.php registered at php-fpm's start (see bindings/php/README.md, "Under php-fpm").
 *
 *   GET /fpm-lock.php?date=2026-11-29[&work=seconds]
 *     200 {"key": ..., "fence": 7, "preloaded": true, ...}  after `work` seconds of (simulated) work under the lock
 *     409 when another request held the report for the whole 1 s wait; 503 when the backend is down
 */

use Leasehold\Client;
use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\LockTimeoutException;
use Leasehold\Lock;

// Preloading already compiled Leasehold's classes; the autoloader only matters without it.
if (!class_exists(Client::class, false)) {
    require __DIR__ . '/../../bindings/php/autoload.php';
}

header('Content-Type: application/json');
$date = preg_match('/^\d{4}-\d{2}-\d{2}$/', (string) ($_GET['date'] ?? '')) === 1 ? $_GET['date'] : date('Y-m-d');
$key = "report:$date";
$work = min(10.0, max(0.0, (float) ($_GET['work'] ?? 0)));
try {
    $client = Client::connect(getenv('LEASEHOLD_URL') ?: 'file://' . sys_get_temp_dir() . '/leasehold');
    $held = $client->synchronized($key, static function (Lock $lock) use ($work): array {
        $taken = [
            'fence' => $lock->fence(),
            'token' => $lock->token(),
            'remaining' => $lock->remainingLifetime(),
        ];
        usleep((int) ($work * 1e6)); // the request's work, handing $lock->fence() to the store it writes
        return $taken;
    }, ttl: 15.0, wait: 1.0);
    echo json_encode(['key' => $key] + $held + [
        'preloaded' => $client->library()->isPreloaded(),
        'library' => $client->version(),
        'pid' => getmypid(),
    ]);
} catch (LockTimeoutException $e) {
    http_response_code(409);
    echo json_encode(['key' => $key, 'error' => $e->getMessage()]);
} catch (BackendUnavailableException $e) {
    http_response_code(503);
    echo json_encode(['key' => $key, 'error' => $e->getMessage()]);
}

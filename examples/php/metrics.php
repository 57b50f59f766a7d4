<?php

declare(strict_types=1);

/*
 * A PHP app that serves Leasehold's metrics on /metrics for Prometheus to scrape, next to a page that takes a lock.
 * The client is persistent: php-fpm workers (or `php -S`) keep it from request to request, so the counters cover
 * every request the worker served, not just the current one.
 *
 *   php -d ffi.enable=1 -S 127.0.0.1:8080 examples/php/metrics.php     # or behind php-fpm with preload.php
 *   GET /report?date=2026-11-29   takes "report:<date>" for the request: {"fence": 7, ...}; 409 when held
 *   GET /metrics                  the Prometheus text: leasehold_acquired_total{backend="local",prefix="leasehold:"} …
 *
 * Scrape config:  - job_name: app   static_configs: [{targets: ['127.0.0.1:8080']}]
 * Each php-fpm worker has its own client and counters: scrape every worker (e.g. a per-worker port) or add the
 * worker's pid as a label when aggregating; after a worker restarts its counters start from zero (Prometheus'
 * rate() handles such resets).
 */

use Leasehold\Client;
use Leasehold\Exception\BackendUnavailableException;

if (!class_exists(Client::class, false)) {
    require __DIR__ . '/../../bindings/php/autoload.php';
}

$client = Client::connect(getenv('LEASEHOLD_URL') ?: 'file://' . sys_get_temp_dir() . '/leasehold', persistent: true);
// "/metrics" and "/report" as paths (php -S, a front controller), or ?page=metrics|report (a plain php-fpm script).
$page = (string) ($_GET['page'] ?? basename((string) parse_url((string) ($_SERVER['REQUEST_URI'] ?? '/'), PHP_URL_PATH)));

if ($page === 'metrics') {
    header('Content-Type: text/plain; version=0.0.4; charset=utf-8');
    echo $client->metrics();
    return;
}

header('Content-Type: application/json');
if ($page !== 'report') {
    http_response_code(404);
    echo json_encode(['error' => 'not found; try /report or /metrics']);
    return;
}
$date = preg_match('/^\d{4}-\d{2}-\d{2}$/', (string) ($_GET['date'] ?? '')) === 1 ? $_GET['date'] : date('Y-m-d');
$lock = $client->createLock("report:$date", 15.0);
try {
    if (!$lock->acquire(0.5)) {
        http_response_code(409);
        echo json_encode(['error' => "report:$date is being built elsewhere"]);
        return;
    }
    try {
        // Build the report here, handing $lock->fence() to the store it is written to.
        echo json_encode(['key' => "report:$date", 'fence' => $lock->fence(), 'pid' => getmypid(),
            // Locks this worker's client has taken, this request's included: it grows from request to request.
            'worker_acquired' => $client->stats()['acquired']]);
    } finally {
        $lock->release();
    }
} catch (BackendUnavailableException $e) {
    http_response_code(503);
    echo json_encode(['error' => $e->getMessage()]);
}

<?php

declare(strict_types=1);

// A second writer for PdoGateTest's races, in a process (and on a connection) of its own: opens GATE_DSN (as
// GATE_USER / GATE_PASSWORD, from the environment so the password is on no command line), begins a transaction,
// prints "guarding", runs the gate on GATE_TABLE for GATE_RESOURCE with GATE_FENCE, commits if it passes, and prints
// one JSON line: {"ok":true}, {"stale":STORED} or {"error":"…"}.

require dirname(__DIR__, 2) . '/autoload.php';

use Leasehold\Exception\StaleFenceException;
use Leasehold\Fence\PdoGate;

$env = static fn (string $name): string => (string) getenv($name);
try {
    $pdo = new PDO($env('GATE_DSN'), $env('GATE_USER') ?: null, $env('GATE_PASSWORD') ?: null,
        [PDO::ATTR_TIMEOUT => 20]);
    $gate = new PdoGate($pdo, $env('GATE_TABLE'));
    $pdo->beginTransaction();
    echo "guarding\n";
    try {
        $gate->guard($env('GATE_RESOURCE'), (int) $env('GATE_FENCE'));
        $pdo->commit();
        echo json_encode(['ok' => true]), "\n";
    } catch (StaleFenceException $e) {
        $pdo->rollBack();
        echo json_encode(['stale' => $e->storedFence(), 'fence' => $e->fence()]), "\n";
    }
} catch (Throwable $e) {
    echo json_encode(['error' => get_class($e) . ': ' . $e->getMessage()]), "\n";
    exit(1);
}

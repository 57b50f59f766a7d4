<?php

declare(strict_types=1);

/*
 * Starts several report workers at once on the same report, so one can watch them take turns:
 *
 *   LEASEHOLD_URL=file:///tmp/leasehold php examples/php/run-workers.php --workers=4 --date=2026-11-29
 *
 * Options: --workers=N (4), --date, --ttl, --work (passed to worker.php), --stall=seconds for the FIRST worker
 * only (make it longer than --ttl to watch its late write being rejected by the fence), --db=path (a new temp
 * file by default). Prints the workers' lines as they happen, then the stored report.
 */

$options = getopt('', ['workers:', 'date:', 'ttl:', 'work:', 'stall:', 'db:']);
$workers = max(1, (int) ($options['workers'] ?? 4));
$date = (string) ($options['date'] ?? date('Y-m-d'));
$ttl = (string) ($options['ttl'] ?? '5');
$work = (string) ($options['work'] ?? '0.3');
$stall = (string) ($options['stall'] ?? '0');
$db = (string) ($options['db'] ?? sys_get_temp_dir() . '/leasehold-reports-' . getmypid() . '.sqlite');

echo "LEASEHOLD_URL=", getenv('LEASEHOLD_URL') ?: '(default)', "  db=$db\n";
$running = [];
for ($i = 1; $i <= $workers; $i++) {
    $command = [PHP_BINARY, __DIR__ . '/worker.php', "--date=$date", "--ttl=$ttl", "--work=$work",
        "--db=$db", "--name=worker-$i", '--stall=' . ($i === 1 ? $stall : '0')];
    // stdout and stderr are inherited as they are: passing STDOUT here would make PHP seek it back to 0, and
    // with output redirected to a file the workers would overwrite each other's lines.
    $process = proc_open($command, [0 => ['file', '/dev/null', 'r']], $pipes);
    if ($process === false) {
        fwrite(STDERR, "cannot start worker $i\n");
        exit(1);
    }
    $running[$i] = $process;
    usleep(50_000); // worker-1 (the staller) first, so it is the one whose lease runs out
}

$failed = 0;
foreach ($running as $i => $process) {
    $code = proc_close($process);
    if ($code !== 0) {
        fwrite(STDERR, "worker-$i exited with $code\n");
        $failed++;
    }
}

$pdo = new PDO('sqlite:' . $db, null, null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
$row = $pdo->query('SELECT id, fence, written_by, body FROM reports WHERE id = ' . $pdo->quote($date))
    ->fetch(PDO::FETCH_ASSOC);
echo 'stored: ', json_encode($row), "\n";
exit($failed === 0 ? 0 : 1);

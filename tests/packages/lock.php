<?php
// What a PHP user of the installed package writes: no Composer, no environment variable; the package is on
// PHP's include_path and finds libleasehold.so.0 through the dynamic loader.
declare(strict_types=1);

require 'Leasehold/autoload.php';

$client = Leasehold\Client::connect($argv[1] ?? 'file:///tmp/leasehold-package-test');
$lock = $client->createLock('package-test', ttl: 10.0);
if (!$lock->acquire(wait: 5.0)) {
    fwrite(STDERR, "not acquired\n");
    exit(1);
}
printf("php %s library %s fence %d\n", Leasehold\Library::VERSION, Leasehold\Library::load()->version(), $lock->fence());
$lock->release();

<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/** Client::synchronized() waited as long as it was allowed to and someone else still held the key. */
class LockTimeoutException extends \RuntimeException implements LeaseholdException
{
}

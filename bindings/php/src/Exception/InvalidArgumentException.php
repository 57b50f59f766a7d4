<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * A bad argument: an empty or oversized key, seconds that are negative, NaN, infinite, too large or not a number,
 * a bad URL, or an operation on a lock that this object does not hold. Nothing was sent to the backend and every
 * existing lease is intact.
 */
class InvalidArgumentException extends \InvalidArgumentException implements LeaseholdException
{
}

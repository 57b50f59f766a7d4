<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * Every exception Leasehold throws implements this interface, so `catch (LeaseholdException $e)` catches them
 * all. For the exceptions that come from the C library, getCode() is the C status (LEASEHOLD_LOST = 2, …).
 */
interface LeaseholdException extends \Throwable
{
}

<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/** A bug in Leasehold (LEASEHOLD_INTERNAL, e.g. a caught panic in the library). Please report it. */
class InternalException extends \RuntimeException implements LeaseholdException
{
}

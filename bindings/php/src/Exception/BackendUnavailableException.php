<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * The backend did not answer within the connect and I/O timeouts, refused the connection or failed. Whether the
 * last request took effect is unknown: do not assume the lock was or was not taken. The message never contains a
 * password.
 *
 * Thrown by Client::synchronized() when only the final release failed, it carries the callback's result
 * (getCallbackResult()).
 */
class BackendUnavailableException extends \RuntimeException implements LeaseholdException
{
    use CallbackResult;
}

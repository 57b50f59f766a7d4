<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * The lease is not ours any more: it expired, someone else took the key, or the backend forgot it. The current
 * holder keeps the lock. Anything written since the lease ended may race with the new holder: that is what the
 * fence is for.
 *
 * Thrown by Client::synchronized() after the callback succeeded, it carries the callback's result
 * (getCallbackResult()), so a caller can still use work that its store accepted through the fence.
 */
class LockLostException extends \RuntimeException implements LeaseholdException
{
    use CallbackResult;
}

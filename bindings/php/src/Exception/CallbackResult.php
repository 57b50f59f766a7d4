<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * For failures of the release at the end of Client::synchronized(), after the callback returned: the callback's
 * result travels with the exception, so work that the protected store accepted (through the fence) is not lost.
 */
trait CallbackResult
{
    private bool $hasCallbackResult = false;
    private mixed $callbackResult = null;

    /** @internal */
    public function withCallbackResult(mixed $result): static
    {
        $this->hasCallbackResult = true;
        $this->callbackResult = $result;
        return $this;
    }

    /** True when the protected callback ran to completion and only the release failed. */
    public function hasCallbackResult(): bool
    {
        return $this->hasCallbackResult;
    }

    /** What the callback returned, when hasCallbackResult(); null otherwise. */
    public function getCallbackResult(): mixed
    {
        return $this->callbackResult;
    }
}

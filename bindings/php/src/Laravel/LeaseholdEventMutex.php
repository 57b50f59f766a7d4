<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Console\Scheduling\CacheAware;
use Illuminate\Console\Scheduling\CacheEventMutex;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\EventMutex;
use Illuminate\Contracts\Cache\Factory as Cache;

/**
 * The scheduler's withoutOverlapping() mutex as a Leasehold lease when the scheduler's cache store is a leasehold
 * one: taken when the event starts (for the event's expiresAt minutes), released when it finishes, in this
 * process or in `schedule:finish` for events run in the background. On any other store it is Laravel's
 * CacheEventMutex. Registered by LeaseholdServiceProvider.
 */
final class LeaseholdEventMutex implements EventMutex, CacheAware
{
    /** The library's longest lease: a longer expiresAt is cut to it. */
    private const MAX_SECONDS = 7 * 24 * 3600;

    private readonly CacheEventMutex $items;
    private ?string $store = null;

    public function __construct(private readonly Cache $cache)
    {
        $this->items = new CacheEventMutex($cache);
    }

    public function create(Event $event)
    {
        $store = $this->leasehold();
        if ($store === null) {
            return $this->items->create($event);
        }
        return $store->lock($event->mutexName(), self::seconds($event))->acquire();
    }

    public function exists(Event $event)
    {
        $store = $this->leasehold();
        if ($store === null) {
            return $this->items->exists($event);
        }
        return !$store->lock($event->mutexName(), self::seconds($event))->get(static fn () => true);
    }

    public function forget(Event $event)
    {
        $store = $this->leasehold();
        if ($store === null) {
            $this->items->forget($event);
            return;
        }
        // The process that ran the event releases its own lease; `schedule:finish` (a background event) runs
        // elsewhere, where only a forced release can end it, as Laravel's own mutex deletes the key.
        if (!$store->releaseHeld($store->getPrefix() . $event->mutexName())) {
            $store->lock($event->mutexName())->forceRelease();
        }
    }

    /** @param string $store */
    public function useStore($store)
    {
        $this->store = $store;
        $this->items->useStore($store);
        return $this;
    }

    private function leasehold(): ?LeaseholdStore
    {
        $store = $this->cache->store($this->store)->getStore();
        return $store instanceof LeaseholdStore ? $store : null;
    }

    private static function seconds(Event $event): int
    {
        return max(1, min((int) $event->expiresAt * 60, self::MAX_SECONDS));
    }
}

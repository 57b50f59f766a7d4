<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use DateTimeInterface;
use Illuminate\Console\Scheduling\CacheAware;
use Illuminate\Console\Scheduling\CacheSchedulingMutex;
use Illuminate\Console\Scheduling\Event;
use Illuminate\Console\Scheduling\SchedulingMutex;
use Illuminate\Contracts\Cache\Factory as Cache;

/**
 * The scheduler's onOneServer() mutex as a Leasehold lease when the scheduler's cache store is a leasehold one:
 * the first server to start an event in a given minute takes a one-hour lease on the event and minute, and the
 * other servers skip it. It is never released, as Laravel's own mutex is never deleted (it expires). On any
 * other store it is Laravel's CacheSchedulingMutex. Registered by LeaseholdServiceProvider.
 */
final class LeaseholdSchedulingMutex implements SchedulingMutex, CacheAware
{
    private const SECONDS = 3600;

    private readonly CacheSchedulingMutex $items;
    private ?string $store = null;

    public function __construct(private readonly Cache $cache)
    {
        $this->items = new CacheSchedulingMutex($cache);
    }

    public function create(Event $event, DateTimeInterface $time)
    {
        $store = $this->leasehold();
        if ($store === null) {
            return $this->items->create($event, $time);
        }
        return $store->lock(self::name($event, $time), self::SECONDS)->acquire();
    }

    public function exists(Event $event, DateTimeInterface $time)
    {
        $store = $this->leasehold();
        if ($store === null) {
            return $this->items->exists($event, $time);
        }
        return !$store->lock(self::name($event, $time), self::SECONDS)->get(static fn () => true);
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

    private static function name(Event $event, DateTimeInterface $time): string
    {
        return $event->mutexName() . $time->format('Hi');
    }
}

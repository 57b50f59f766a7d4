<?php

declare(strict_types=1);

namespace Leasehold\Metrics;

/**
 * @internal Prometheus text as PoolMetrics stores and merges it. A set of families is
 * `name => ['type' => string, 'help' => string, 'series' => [sample => int|float]]`, where a sample is its name and
 * labels as printed (`leasehold_acquired_total{backend="local",prefix="app:"}`), in the order the library prints
 * them, so histogram buckets stay in order.
 *
 * `leasehold metrics --dir` (crates/leasehold-cli/src/metrics.rs) reads the same files and must print byte for byte
 * what PoolMetrics::render() prints: the same order (first appearance, pools and files by name), the same sums (in
 * the same order, so floating-point sums agree too) and the same number format. Change both together.
 */
final class Exposition
{
    /**
     * Families of the library's text (Client::metrics()).
     *
     * @return array<string, array{type: string, help: string, series: array<string, int|float>}>
     */
    public static function parse(string $text): array
    {
        $families = [];
        $current = null;
        foreach (explode("\n", $text) as $line) {
            if ($line === '') {
                continue;
            }
            if (str_starts_with($line, '# HELP ') || str_starts_with($line, '# TYPE ')) {
                [$name, $rest] = array_pad(explode(' ', substr($line, 7), 2), 2, '');
                $families[$name] ??= ['type' => 'untyped', 'help' => '', 'series' => []];
                $families[$name][$line[2] === 'H' ? 'help' : 'type'] = $rest;
                $current = $name;
                continue;
            }
            if ($line[0] === '#') {
                continue;
            }
            // The value is after the last space: a label value may hold spaces, never a raw newline.
            $space = strrpos($line, ' ');
            if ($space === false) {
                continue;
            }
            $sample = substr($line, 0, $space);
            $family = $current ?? explode('{', $sample, 2)[0];
            $families[$family] ??= ['type' => 'untyped', 'help' => '', 'series' => []];
            $families[$family]['series'][$sample] = self::value(substr($line, $space + 1));
        }
        return $families;
    }

    /**
     * $add summed into $into; families and samples new to $into go after the ones it has.
     *
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $into
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $add
     * @return array<string, array{type: string, help: string, series: array<string, int|float>}>
     */
    public static function add(array $into, array $add): array
    {
        foreach ($add as $name => $family) {
            if (!isset($into[$name])) {
                $into[$name] = ['type' => $family['type'], 'help' => $family['help'], 'series' => []];
            }
            foreach ($family['series'] as $sample => $value) {
                $into[$name]['series'][$sample] = isset($into[$name]['series'][$sample])
                    ? $into[$name]['series'][$sample] + $value
                    : $value;
            }
        }
        return $into;
    }

    /**
     * What $current counted since $last. A sample below its last value means the counters started again (a client
     * made anew), so all of it is new.
     *
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $current
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $last
     * @return array<string, array{type: string, help: string, series: array<string, int|float>}>
     */
    public static function delta(array $current, array $last): array
    {
        foreach ($current as $name => $family) {
            foreach ($family['series'] as $sample => $value) {
                $before = $last[$name]['series'][$sample] ?? 0;
                if ($value >= $before) {
                    $current[$name]['series'][$sample] = $value - $before;
                }
            }
        }
        return $current;
    }

    /** @param array<string, array{type: string, help: string, series: array<string, int|float>}> $families */
    public static function isZero(array $families): bool
    {
        foreach ($families as $family) {
            foreach ($family['series'] as $value) {
                if ($value != 0) {
                    return false;
                }
            }
        }
        return true;
    }

    /**
     * The families as stored in a file: lists, so that every reader keeps their order.
     *
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $families
     * @return list<array{name: string, type: string, help: string, series: list<array{string, int|float}>}>
     */
    public static function toList(array $families): array
    {
        $list = [];
        foreach ($families as $name => $family) {
            $series = [];
            foreach ($family['series'] as $sample => $value) {
                $series[] = [(string) $sample, $value];
            }
            $list[] = ['name' => (string) $name, 'type' => $family['type'], 'help' => $family['help'],
                'series' => $series];
        }
        return $list;
    }

    /**
     * The families of a stored list; entries of the wrong shape are left out.
     *
     * @return array<string, array{type: string, help: string, series: array<string, int|float>}>
     */
    public static function fromList(mixed $list): array
    {
        $families = [];
        foreach (is_array($list) ? $list : [] as $family) {
            if (!is_array($family) || !is_string($family['name'] ?? null) || !is_array($family['series'] ?? null)) {
                continue;
            }
            $name = $family['name'];
            $families[$name] ??= ['type' => is_string($family['type'] ?? null) ? $family['type'] : 'untyped',
                'help' => is_string($family['help'] ?? null) ? $family['help'] : '', 'series' => []];
            foreach ($family['series'] as $pair) {
                if (is_array($pair) && is_string($pair[0] ?? null)
                    && (is_int($pair[1] ?? null) || is_float($pair[1] ?? null))) {
                    $families[$name]['series'][$pair[0]] = isset($families[$name]['series'][$pair[0]])
                        ? $families[$name]['series'][$pair[0]] + $pair[1]
                        : $pair[1];
                }
            }
        }
        return $families;
    }

    /**
     * The exposition text of merged families.
     *
     * @param array<string, array{type: string, help: string, series: array<string, int|float>}> $families
     */
    public static function render(array $families): string
    {
        $out = '';
        foreach ($families as $name => $family) {
            $out .= "# HELP $name {$family['help']}\n# TYPE $name {$family['type']}\n";
            foreach ($family['series'] as $sample => $value) {
                $out .= $sample . ' ' . self::number($value) . "\n";
            }
        }
        return $out;
    }

    /**
     * $sample with $labels put first: `name{a="1",…}`.
     *
     * @param array<string, string> $labels
     */
    public static function withLabels(string $sample, array $labels): string
    {
        $text = [];
        foreach ($labels as $label => $value) {
            $text[] = $label . '="' . str_replace(['\\', '"', "\n"], ['\\\\', '\\"', '\\n'], $value) . '"';
        }
        $added = implode(',', $text);
        $brace = strpos($sample, '{');
        if ($brace === false) {
            return "$sample{{$added}}";
        }
        $rest = substr($sample, $brace + 1);
        return substr($sample, 0, $brace + 1) . $added . ($rest === '}' ? '' : ',') . $rest;
    }

    /**
     * A number as Rust's Display prints it (which is what the library prints and the CLI prints): integers as they
     * are, floats as the shortest decimal that reads back as the same float, never in exponent form, no ".0".
     * Independent of php.ini's precision settings.
     */
    public static function number(int|float $value): string
    {
        if (is_int($value)) {
            return (string) $value;
        }
        if (!is_finite($value)) {
            return is_nan($value) ? 'NaN' : ($value > 0 ? '+Inf' : '-Inf');
        }
        if ($value == 0.0) {
            return '0';
        }
        for ($digits = 0; $digits < 17; $digits++) {
            $text = sprintf('%.' . $digits . 'e', $value);
            if ((float) $text === $value) {
                break;
            }
        }
        if (preg_match('/^(-?)(\d)(?:\.(\d+))?e([+-]?\d+)$/', $text, $m) !== 1) {
            return $text;
        }
        $mantissa = $m[2] . ($m[3] ?? '');
        $point = 1 + (int) $m[4];
        if ($point <= 0) {
            $plain = '0.' . str_repeat('0', -$point) . $mantissa;
        } elseif ($point >= strlen($mantissa)) {
            $plain = $mantissa . str_repeat('0', $point - strlen($mantissa));
        } else {
            $plain = substr($mantissa, 0, $point) . '.' . substr($mantissa, $point);
        }
        if (str_contains($plain, '.')) {
            $plain = rtrim(rtrim($plain, '0'), '.');
        }
        return $m[1] . $plain;
    }

    private static function value(string $text): int|float
    {
        if (preg_match('/^-?\d{1,18}$/', $text) === 1) {
            return (int) $text;
        }
        return match ($text) {
            '+Inf', 'Inf' => INF,
            '-Inf' => -INF,
            'NaN' => NAN,
            default => (float) $text,
        };
    }
}

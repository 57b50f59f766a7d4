# The chart of docs/perf/rust.md: every latency figure of the Rust suite beside its floor measured in the
# same run. Drawn by scripts/bench.sh: gnuplot -e "data='target/perf/chart.dat'; out='docs/perf/rust.png'" docs/perf/rust.gp
set terminal pngcairo size 1600,760 font "DejaVu Sans,11"
set output out
set title "Leasehold (Rust): each figure beside its floor, measured in the same run (median / p50, µs, log scale)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [1:*]
set ylabel "µs per operation"
set grid ytics
set key top left
set xtics rotate by 30 right nomirror
set bmargin 12
plot data using 3:xtic(1) title "floor" lc rgb "#4C72B0", \
     '' using 2 title "measured (label: ratio, target)" lc rgb "#DD8452"

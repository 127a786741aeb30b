set terminal pngcairo size 1420,540 font "sans,10"
set output "busbw.png"
set datafile missing "?"
set multiplot title "AllReduce float32 sum, out of place: busbw (median) vs size, this machine (2 vCPUs)"
set logscale xy
set xrange [5.333333333333333:100663296.0]
set yrange [1e-06:10]
set xtics ("8B" 8, "1KiB" 1024, "16KiB" 16384, "1MiB" 1048576, "16MiB" 16777216)
set format y "10^{%L}"
set grid xtics ytics mytics lc rgb '#dddddd'
set xlabel "size"
set ylabel "busbw (GB/s)"
unset key
set size 0.3333,0.8400
set origin 0.0000,0.0900
set title "n = 2"
plot "busbw_n2.dat" using 1:2 with linespoints lw 2.5 lc rgb "#d62728" pt 7, \
     "busbw_n2.dat" using 1:3 with linespoints lw 2.5 lc rgb "#ff7f0e" pt 5, \
     "busbw_n2.dat" using 1:4 with linespoints lw 1.5 lc rgb "#1f77b4" pt 9 dt 2, \
     "busbw_n2.dat" using 1:5 with linespoints lw 1.5 lc rgb "#17becf" pt 11 dt 2, \
     "busbw_n2.dat" using 1:6 with linespoints lw 1.5 lc rgb "#2ca02c" pt 13 dt 4, \
     2.744 with lines lw 1 lc rgb "#888888" dt 3
set origin 0.3333,0.0900
set title "n = 4"
plot "busbw_n4.dat" using 1:2 with linespoints lw 2.5 lc rgb "#d62728" pt 7, \
     "busbw_n4.dat" using 1:3 with linespoints lw 2.5 lc rgb "#ff7f0e" pt 5, \
     "busbw_n4.dat" using 1:4 with linespoints lw 1.5 lc rgb "#1f77b4" pt 9 dt 2, \
     "busbw_n4.dat" using 1:5 with linespoints lw 1.5 lc rgb "#17becf" pt 11 dt 2, \
     "busbw_n4.dat" using 1:6 with linespoints lw 1.5 lc rgb "#2ca02c" pt 13 dt 4, \
     0.9 with lines lw 1 lc rgb "#888888" dt 3
set origin 0.6667,0.0900
set title "n = 8"
plot "busbw_n8.dat" using 1:2 with linespoints lw 2.5 lc rgb "#d62728" pt 7, \
     "busbw_n8.dat" using 1:3 with linespoints lw 2.5 lc rgb "#ff7f0e" pt 5, \
     "busbw_n8.dat" using 1:4 with linespoints lw 1.5 lc rgb "#1f77b4" pt 9 dt 2, \
     "busbw_n8.dat" using 1:5 with linespoints lw 1.5 lc rgb "#17becf" pt 11 dt 2, \
     "busbw_n8.dat" using 1:6 with linespoints lw 1.5 lc rgb "#2ca02c" pt 13 dt 4, \
     0.479 with lines lw 1 lc rgb "#888888" dt 3
set origin 0,0
set size 1,0.09
unset title
unset border
unset tics
unset grid
unset xlabel
unset ylabel
unset logscale
set xrange [0:1]
set yrange [0:1]
set lmargin 0
set rmargin 0
set tmargin 0
set bmargin 0
set key center center horizontal maxrows 1 reverse Left samplen 3 width -1 font ',10'
plot NaN with linespoints lw 2.5 lc rgb "#d62728" pt 7 title "ringcc shm", \
     NaN with linespoints lw 2.5 lc rgb "#ff7f0e" pt 5 title "ringcc tcp", \
     NaN with linespoints lw 1.5 lc rgb "#1f77b4" pt 9 dt 2 title "Open MPI vader", \
     NaN with linespoints lw 1.5 lc rgb "#17becf" pt 11 dt 2 title "Open MPI tcp", \
     NaN with linespoints lw 1.5 lc rgb "#2ca02c" pt 13 dt 4 title "Gloo tcp", \
     NaN with lines lw 1 lc rgb "#888888" dt 3 title "TCP ring ceiling"
unset multiplot

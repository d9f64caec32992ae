# SPDX-License-Identifier: Apache-2.0
# wan.gp: the plot of tools/bench, scenario (b): throughput against streams,
# one line per window, pcopy solid and iperf3 dashed in the same colour.
#
#   gnuplot -e "datafile='wan.dat'; outfile='plot.png'; subtitle='...'; cap=1000; scp=260" wan.gp
#
# datafile columns: streams, pcopy at 256K, 1M, 4M, iperf3 at 256K, 1M, 4M
# (Mbit/s; "-" or NaN where missing). cap is the link rate and scp scp's
# figure, both in Mbit/s; scp <= 0 leaves its line out.

if (!exists("datafile")) datafile = 'wan.dat'
if (!exists("outfile")) outfile = 'plot.png'
if (!exists("subtitle")) subtitle = ''
if (!exists("cap")) cap = 1000
if (!exists("scp")) scp = 0

set terminal pngcairo size 960,640 font "sans,11" noenhanced
set output outfile
set datafile missing "-"
set title "pcopy over an emulated 1 Gbit/s, 50 ms RTT link (median of runs)\n".subtitle
set xlabel "parallel TCP streams (pcopy -s, iperf3 -P)"
set ylabel "throughput, Mbit/s (file bytes, first to last byte)"
set logscale x 2
set xrange [0.8:20]
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16)
set yrange [0:cap * 1.12]
set grid ytics lc rgb "#dddddd"
set key outside below center horizontal maxcols 3 box
set bmargin 7

set style line 1 lc rgb "#1b9e77" lw 2.5 pt 7 ps 1.2
set style line 2 lc rgb "#d95f02" lw 2.5 pt 7 ps 1.2
set style line 3 lc rgb "#7570b3" lw 2.5 pt 7 ps 1.2
set style line 4 lc rgb "#1b9e77" lw 1.5 dt 2 pt 6 ps 1.0
set style line 5 lc rgb "#d95f02" lw 1.5 dt 2 pt 6 ps 1.0
set style line 6 lc rgb "#7570b3" lw 1.5 dt 2 pt 6 ps 1.0

set arrow from 0.8, cap to 20, cap nohead lc rgb "#888888" lw 1 dt 3
set label sprintf("link cap %g Mbit/s", cap) at 1.0, cap * 1.035 tc rgb "#666666"
if (scp > 0) {
    set arrow from 0.8, scp to 20, scp nohead lc rgb "#aa3333" lw 1 dt 4
    set label sprintf("scp %.0f Mbit/s", scp) at 11, scp * 1.06 tc rgb "#aa3333"
}

# In this order the key's columns are the windows: pcopy above iperf3.
plot datafile using 1:2 with linespoints ls 1 title "pcopy -w 256K", \
     ''       using 1:5 with linespoints ls 4 title "iperf3 -w 256K", \
     ''       using 1:3 with linespoints ls 2 title "pcopy -w 1M", \
     ''       using 1:6 with linespoints ls 5 title "iperf3 -w 1M", \
     ''       using 1:4 with linespoints ls 3 title "pcopy -w 4M", \
     ''       using 1:7 with linespoints ls 6 title "iperf3 -w 4M"

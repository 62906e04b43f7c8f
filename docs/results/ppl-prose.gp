# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot ppl-prose.gp
# (from any directory: the data and the image are found beside the script).

script = 'ppl-prose.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'ppl-prose.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 noenhanced font "sans,10" linewidth 1.5
} else {
    set terminal png size 900,600 noenhanced
}
set output here.'ppl-prose.png'

set title 'Perplexity, mean over seeds (non-overlapping): corpus prose'
set xlabel 'evaluation length (tokens)'
set ylabel 'perplexity'
set logscale x 2
set format x "%g"
set logscale y 10
set format y "%g"
set ytics (15, 20, 25, 30)
set grid xtics ytics mxtics mytics lc rgb "#dddddd" lt 1, lc rgb "#eeeeee" lt 1
set key outside right top noenhanced spacing 1.2
set border 3
set tics nomirror
# the ranges hug the data, with a small margin
set autoscale xfixmin
set autoscale xfixmax
set autoscale yfixmin
set autoscale yfixmax
set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05

plot data index 0 using 1:2 with linespoints lt 1 dt 1 lw 1.5 pt 7 ps 0.8 title 'nope (n=3, std <= 1.0% of the mean)', \
     data index 1 using 1:2 with linespoints lt 2 dt 1 lw 1.5 pt 7 ps 0.8 title 'ape-sin (n=3, std <= 7.9% of the mean)', \
     data index 2 using 1:2 with linespoints lt 3 dt 1 lw 1.5 pt 7 ps 0.8 title 'rope (n=3, std <= 9.2% of the mean)', \
     data index 3 using 1:2 with linespoints lt 4 dt 1 lw 1.5 pt 7 ps 0.8 title 'alibi (n=3, std <= 2.1% of the mean)', \
     data index 4 using 1:2 with linespoints lt 5 dt 1 lw 1.5 pt 7 ps 0.8 title 'kerple-log (n=3, std <= 2.2% of the mean)', \
     data index 5 using 1:2 with linespoints lt 6 dt 1 lw 1.5 pt 7 ps 0.8 title 'kerple-power (n=3, std <= 0.6% of the mean)', \
     data index 6 using 1:2 with linespoints lt 7 dt 1 lw 1.5 pt 7 ps 0.8 title 't5 (n=3, std <= 0.9% of the mean)', \
     data index 7 using 1:2 with linespoints lt 8 dt 1 lw 1.5 pt 7 ps 0.8 title 'mep-free (n=3, std <= 2.2% of the mean)', \
     data index 8 using 1:2 with linespoints lt 1 dt 2 lw 1.5 pt 7 ps 0.8 title 'mep-param (n=3, std <= 4.9% of the mean)', \
     data index 9 using 1:2 with linespoints lt 2 dt 2 lw 1.5 pt 7 ps 0.8 title 'bipe-alibi (n=3, std <= 0.8% of the mean)', \
     data index 10 using 1:2 with linespoints lt 3 dt 2 lw 1.5 pt 7 ps 0.8 title 'bipe-rope (n=3, std <= 1.4% of the mean)', \
     data index 11 using 1:2 with linespoints lt 4 dt 2 lw 1.5 pt 7 ps 0.8 title 'qin-type1 (n=3, std <= 1.2% of the mean)', \
     data index 12 using 1:2 with linespoints lt 5 dt 2 lw 1.5 pt 7 ps 0.8 title 'qin-type2 (n=3, std <= 1.1% of the mean)', \
     data index 13 using 1:2 with linespoints lt 6 dt 2 lw 1.5 pt 7 ps 0.8 title 'qin-harmonic (n=3, std <= 1.0% of the mean)', \
     data index 14 using 1:2 with linespoints lt 7 dt 2 lw 1.5 pt 7 ps 0.8 title 'fire (n=3, std <= 1.3% of the mean)', \
     data index 15 using 1:2 with linespoints lt 8 dt 2 lw 1.5 pt 7 ps 0.8 title 'window-sinks (n=3, std <= 0.8% of the mean)', \
     data index 16 using 1:2 with linespoints lt 1 dt 3 lw 1.5 pt 7 ps 0.8 title 'rope-yarn4 (n=3, std <= 4.9% of the mean)', \
     data index 17 using 1:2 with linespoints lt 2 dt 3 lw 1.5 pt 7 ps 0.8 title 'rope-yarn-dyn (n=3, std <= 13.7% of the mean)', \
     data index 18 using 1:2 with linespoints lt 3 dt 3 lw 1.5 pt 7 ps 0.8 title 'rope-pi4 (n=3, std <= 5.7% of the mean)', \
     data index 19 using 1:2 with linespoints lt 4 dt 3 lw 1.5 pt 7 ps 0.8 title 'ssmax (n=3, std <= 1.3% of the mean)', \
     data index 20 using 1:2 with linespoints lt 5 dt 3 lw 1.5 pt 7 ps 0.8 title 'training length 64'
unset output

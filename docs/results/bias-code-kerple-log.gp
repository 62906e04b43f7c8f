# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot bias-code-kerple-log.gp
# (from any directory: the data and the image are found beside the script).

script = 'bias-code-kerple-log.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'bias-code-kerple-log.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 noenhanced font "sans,10" linewidth 1.5
} else {
    set terminal png size 900,600 noenhanced
}
set output here.'bias-code-kerple-log.png'

set title 'Learned bias T_h(d) of kerple-log (seed 1, corpus code): kerple on the token stream'
set xlabel 'distance d = i - j'
set ylabel 'bias added to the attention score'
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

plot data index 0 using 1:2 with lines lt 1 dt 1 lw 1.5 title 'head 0', \
     data index 1 using 1:2 with lines lt 2 dt 1 lw 1.5 title 'head 1', \
     data index 2 using 1:2 with lines lt 3 dt 1 lw 1.5 title 'head 2', \
     data index 3 using 1:2 with lines lt 4 dt 1 lw 1.5 title 'head 3', \
     data index 4 using 1:2 with lines lt 5 dt 1 lw 1.5 title 'training length 64'
unset output

# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot bias-code-kerple-log.gp
# (from any directory: the data and the image are found beside the script).

script = 'bias-code-kerple-log.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'bias-code-kerple-log.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
# at twice 900x600, type and lines scaled alike
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1800,1200 noenhanced font "sans,20" linewidth 3
} else {
    set terminal png size 1800,1200 noenhanced font "sans,20" linewidth 3
}
set output here.'bias-code-kerple-log.png'

set title 'code: learned bias T_h(d) of kerple-log (seed 1, corpus code): kerple on the token stream'
set xlabel 'distance d = i - j'
set ylabel 'bias / its largest |value| (each head)'
set grid xtics ytics mxtics mytics lc rgb "#dddddd" lt 1, lc rgb "#eeeeee" lt 1
set key outside below center horizontal noenhanced spacing 1.2 maxrows 4
set border 3
set tics nomirror
# the ranges hug the data, with a small margin
set autoscale xfixmin
set autoscale xfixmax
set autoscale yfixmin
set autoscale yfixmax
set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05

# the marked x: a thin grey dashed line, labelled (in the title of small multiples), not in the legend
set arrow from 64, graph 0 to 64, graph 1 nohead dt 2 lw 1 lc rgb "#888888" back
set label 'training length 64' at 64, graph 0 offset 0.5, 1 left tc rgb "#666666"

plot data index 0 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 0.9 pi 128 title 'head 0 (/ 12.4)', \
     data index 1 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 0.9 pi 128 title 'head 1 (/ 8.11)', \
     data index 2 using 1:2 with linespoints lc rgb "#009E73" dt 3 lw 1.5 pt 9 ps 0.9 pi 128 title 'head 2 (/ 12.2)', \
     data index 3 using 1:2 with linespoints lc rgb "#CC79A7" dt 4 lw 1.5 pt 13 ps 0.9 pi 128 title 'head 3 (/ 9.72)'

unset output

# the same figure as a PDF (vector, for a paper)
if (strstrt(GPVAL_TERMINALS, "pdfcairo") > 0) {
    set terminal pdfcairo size 6in,4in noenhanced font "sans,9" linewidth 1.5
    set output here.'bias-code-kerple-log.pdf'
    replot
    unset output
}

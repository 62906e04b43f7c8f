# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot params-passkey-kerple-log-term_kerple_r1.gp
# (from any directory: the data and the image are found beside the script).

script = 'params-passkey-kerple-log-term_kerple_r1.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'params-passkey-kerple-log-term_kerple_r1.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
# at twice 900x600, type and lines scaled alike
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1800,1200 noenhanced font "sans,20" linewidth 3
} else {
    set terminal png size 1800,1200 noenhanced font "sans,20" linewidth 3
}
set output here.'params-passkey-kerple-log-term_kerple_r1.png'

set title 'passkey: term.kerple.r1 of kerple-log over training (seed 1, corpus passkey)'
set xlabel 'training step'
set ylabel 'term.kerple.r1'
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

plot data index 0 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 0.9 pi 313 title '[0]', \
     data index 1 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 0.9 pi 313 title '[1]', \
     data index 2 using 1:2 with linespoints lc rgb "#009E73" dt 3 lw 1.5 pt 9 ps 0.9 pi 313 title '[2]', \
     data index 3 using 1:2 with linespoints lc rgb "#CC79A7" dt 4 lw 1.5 pt 13 ps 0.9 pi 313 title '[3]'

unset output

# the same figure as a PDF (vector, for a paper)
if (strstrt(GPVAL_TERMINALS, "pdfcairo") > 0) {
    set terminal pdfcairo size 6in,4in noenhanced font "sans,9" linewidth 1.5
    set output here.'params-passkey-kerple-log-term_kerple_r1.pdf'
    replot
    unset output
}

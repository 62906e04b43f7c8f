# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot ppl-code.gp
# (from any directory: the data and the image are found beside the script).

script = 'ppl-code.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'ppl-code.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
# at twice 900x600, type and lines scaled alike
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1800,1200 noenhanced font "sans,20" linewidth 3
} else {
    set terminal png size 1800,1200 noenhanced font "sans,20" linewidth 3
}
set output here.'ppl-code.png'

set title 'code: perplexity vs evaluation length (non-overlapping): corpus code; mean over seeds, band -/+ 1 std'
set xlabel 'evaluation length (tokens)'
set ylabel 'perplexity per token (log scale)'
set logscale x 2
set format x "%g"
set logscale y 10
set format y "%g"
set ytics (4, 6, 8, 10, 12)
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

set yrange [3.565704131:15.15329955]
set key inside top left noenhanced spacing 1.1 font ",16"
set lmargin 7
pdf = strstrt(GPVAL_TERMINALS, "pdfcairo") > 0
do for [pass = 1:2] {
if (pass == 2 && pdf) {
    set terminal pdfcairo size 9in,13.0in noenhanced font "sans,8" linewidth 1.2
    set key font ",7"
    set output here.'ppl-code.pdf'
}
if (pass == 1 || pdf) {
set multiplot layout 4, 4 title 'code: perplexity vs evaluation length (non-overlapping): corpus code; mean over seeds, band -/+ 1 std (dashed: training length 64)'
unset title
set title 'nope'
set ylabel ''
set label 1 'perplexity per token (log scale)' at screen 0.015, 0.5 center rotate by 90
set xlabel ''
unset key
plot data index 0 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 0 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'nope (n=3)'
set title 'ape'
set ylabel ''
unset label 1
set xlabel ''
unset key
plot data index 1 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 1 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'ape-sin (n=3)'
set title 'rope'
set ylabel ''
set xlabel ''
set key inside top left Left reverse opaque noenhanced samplen 2
plot data index 2 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 2 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'rope (n=3)', \
     data index 16 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#D55E00" notitle, \
     data index 16 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 1.2 pi 1 title 'rope-yarn4 (n=3)', \
     data index 17 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#009E73" notitle, \
     data index 17 using 1:2 with linespoints lc rgb "#009E73" dt 3 lw 1.5 pt 9 ps 1.2 pi 1 title 'rope-yarn-dyn (n=3)', \
     data index 18 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#CC79A7" notitle, \
     data index 18 using 1:2 with linespoints lc rgb "#CC79A7" dt 4 lw 1.5 pt 13 ps 1.2 pi 1 title 'rope-pi4 (n=3)'
set title 'alibi'
set ylabel ''
set xlabel ''
unset key
plot data index 3 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 3 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'alibi (n=3)'
set title 'kerple'
set ylabel ''
set xlabel ''
set key inside top left Left reverse opaque noenhanced samplen 2
plot data index 4 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 4 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'kerple-log (n=3)', \
     data index 5 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#D55E00" notitle, \
     data index 5 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 1.2 pi 1 title 'kerple-power (n=3)'
set title 't5'
set ylabel ''
set xlabel ''
unset key
plot data index 6 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 6 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 't5 (n=3)'
set title 'mep'
set ylabel ''
set xlabel ''
set key inside top left Left reverse opaque noenhanced samplen 2
plot data index 7 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 7 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'mep-free (n=3)', \
     data index 8 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#D55E00" notitle, \
     data index 8 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 1.2 pi 1 title 'mep-param (n=3)'
set title 'bipe'
set ylabel ''
set xlabel ''
set key inside top left Left reverse opaque noenhanced samplen 2
plot data index 9 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 9 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'bipe-alibi (n=3)', \
     data index 10 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#D55E00" notitle, \
     data index 10 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 1.2 pi 1 title 'bipe-rope (n=3)'
set title 'qin'
set ylabel ''
set xlabel ''
set key inside top left Left reverse opaque noenhanced samplen 2
plot data index 11 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 11 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'qin-type1 (n=3)', \
     data index 12 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#D55E00" notitle, \
     data index 12 using 1:2 with linespoints lc rgb "#D55E00" dt 2 lw 1.5 pt 5 ps 1.2 pi 1 title 'qin-type2 (n=3)', \
     data index 13 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#009E73" notitle, \
     data index 13 using 1:2 with linespoints lc rgb "#009E73" dt 3 lw 1.5 pt 9 ps 1.2 pi 1 title 'qin-harmonic (n=3)'
set title 'fire'
set ylabel ''
set xlabel ''
unset key
plot data index 14 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 14 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'fire (n=3)'
set title 'window'
set ylabel ''
set xlabel 'evaluation length (tokens)'
unset key
plot data index 15 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 15 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'window-sinks (n=3)'
set title 'ssmax'
set ylabel ''
set xlabel 'evaluation length (tokens)'
unset key
plot data index 19 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 19 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'ssmax (n=3)'
set title 'fox'
set ylabel ''
set xlabel 'evaluation length (tokens)'
unset key
plot data index 20 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 20 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'fox (n=3)'
set title 'cope'
set ylabel ''
set xlabel 'evaluation length (tokens)'
unset key
plot data index 21 using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc rgb "#0072B2" notitle, \
     data index 21 using 1:2 with linespoints lc rgb "#0072B2" dt 1 lw 1.5 pt 7 ps 1.2 pi 1 title 'cope (n=3)'
unset multiplot
unset output
}
}

# Drawn by biaskit. Restyle the figure by editing this script, then run
#     gnuplot passkey-passkey-alibi.gp
# (from any directory: the data and the image are found beside the script).

script = 'passkey-passkey-alibi.gp'
here = ''
if (exists("ARG0") && strlen(ARG0) > strlen(script) && \
    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]
data = here.'passkey-passkey-alibi.dat'

# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal
# at twice 900x600, type and lines scaled alike
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1800,1200 noenhanced font "sans,20" linewidth 3
} else {
    set terminal png size 1800,1200 noenhanced font "sans,20" linewidth 3
}
set output here.'passkey-passkey-alibi.png'

set title 'Passkey retrieval of alibi: exact match over 1 seed'
set xlabel 'length (tokens)'
set ylabel 'depth of the key'
set cblabel 'exact match'
set cbrange [0:1]
set palette defined (0 "#ffffff", 1 "#08306b")
set xrange [-0.5:5.5]
set yrange [-0.5:4.5]
set tics out nomirror
unset key
set xtics ("127" 0, "128" 1, "256" 2, "512" 3, "1024" 4, "2048" 5)
set ytics ("0" 0, "0.25" 1, "0.5" 2, "0.75" 3, "1" 4)
mid = 0.5
plot data using 1:2:3 with image, \
     data using 1:2:($3 == $3 ? sprintf("%.2f", $3) : ""):($3 > mid ? 0xffffff : 0) \
     with labels tc rgb variable
unset output

# the same figure as a PDF (vector, for a paper)
if (strstrt(GPVAL_TERMINALS, "pdfcairo") > 0) {
    set terminal pdfcairo size 6in,4in noenhanced font "sans,9" linewidth 1.5
    set output here.'passkey-passkey-alibi.pdf'
    replot
    unset output
}

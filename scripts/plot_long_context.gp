# Loss by position of the `full` method three ways (and position interpolation without its
# fine-tune), against the plain model's sliding window; scripts/long_context.sh writes the CSV:
#   gnuplot -e "csv='runs/long-context/long_context.csv'" -e "out='runs/long-context/long_context.png'" scripts/plot_long_context.gp
# Columns: position, then window, plain, ntk4, pi4, linear4_untrained (2-6), the same as centred
# means over 65 positions (7-11).
set datafile separator ','
set datafile missing ''
set terminal pngcairo size 1100,900 font ',11'
set output out
set termoption noenhanced
set grid
set xrange [0:1024]
set multiplot layout 2,1
set title 'Loss by position on 1,024-token held-out streams (mean over the streams and 65 positions)'
set key top right
set ylabel 'loss (nats)'
unset xlabel
set arrow 1 from 256, graph 0 to 256, graph 1 nohead dt 2 lc 'gray40'
plot csv using 1:7 with lines lw 5 lc 'gray60' title 'plain: sliding window of 256', \
     '' using 1:8 with lines lw 2 lc 1 title 'plain: full', \
     '' using 1:9 with lines lw 2 lc 2 title 'NTK-aware x4, no training: full', \
     '' using 1:10 with lines lw 2 lc 3 title 'position interpolation x4, fine-tuned at 1,024: full', \
     '' using 1:11 with lines lw 1 dt 2 lc 4 title 'position interpolation x4, no fine-tune: full'
set title "Difference from the plain model's full pass (same smoothing): below zero is better"
set ylabel 'loss - plain full (nats)'
set xlabel 'position in the stream'
set key top left
plot 0 with lines lc 'black' lw 1 notitle, \
     csv using 1:($7 - $8) with lines lw 5 lc 'gray60' title 'sliding window', \
     '' using 1:($9 - $8) with lines lw 2 lc 2 title 'NTK x4', \
     '' using 1:($10 - $8) with lines lw 2 lc 3 title 'interpolation x4 + fine-tune', \
     '' using 1:($11 - $8) with lines lw 1 dt 2 lc 4 title 'interpolation x4, no fine-tune'
unset multiplot

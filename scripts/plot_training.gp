# Training curves of several pretraining runs in one PNG, from their log.csv files
# (step,train_loss,val_loss,lr,tokens_per_s,elapsed_s): training loss on the left, held-out loss on
# the right, one colour per run.
#
#   gnuplot -e "files='checkpoints/pretrain/log.csv checkpoints/pretrain-rope/log.csv'" \
#           -e "titles='learned rotary'" -e "out='runs/training.png'" scripts/plot_training.gp
#
# titles defaults to the runs' folder names, out to runs/training.png; title is the picture's.
if (!exists("files")) files = "checkpoints/pretrain/log.csv checkpoints/pretrain-rope/log.csv"
if (!exists("out")) out = "runs/training.png"
if (!exists("titles")) {
  titles = ""
  do for [f in files] {
    # checkpoints/<run>/log.csv -> <run>
    name = system("basename \"$(dirname '" . f . "')\"")
    titles = titles . (strlen(titles) > 0 ? " " : "") . name
  }
}

set datafile separator ","
set datafile missing ""
set terminal pngcairo size 1400,560 font ",11"
set output out
set termoption noenhanced
set grid
set key top right
set xlabel "step"
set ylabel "loss (nats)"
if (!exists("title")) title = "Pretraining, step for step (same seed, data, batches and learning rates)"
set multiplot layout 1,2 title title

set title "training loss (thin: each step; thick: smoothed)"
plot for [i=1:words(files)] word(files, i) using 1:2 with lines lw 0.6 lc i notitle, \
     for [i=1:words(files)] word(files, i) using 1:2 smooth bezier with lines lw 2.5 lc i title word(titles, i)

set title "held-out loss"
plot for [i=1:words(files)] word(files, i) using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc i title word(titles, i)

unset multiplot
print "training curves: " . out

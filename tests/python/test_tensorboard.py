"""A pretrain run's TensorBoard files, read with TensorBoard's own reader (EventAccumulator): every
scalar users look at, at the steps and with the values of log.csv, and the run's settings as text."""
import csv
import math
import os

from mvgpt_test import app, check, prepare, require, run, scratch

event_accumulator = require("tensorboard.backend.event_processing.event_accumulator")
import tensorboard  # noqa: E402  (after the check that it is installed)

cwd = scratch("tensorboard")
prepare(cwd)
with open(os.path.join(cwd, "tiny.json"), "w") as f:
    f.write('{"vocab_size": 300, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}')
run([app("pretrain"), "--config", "tiny.json", "--steps", "4", "--batch-size", "4", "--eval-interval", "2",
     "--eval-windows", "4", "--device", "cpu", "--lr", "3e-3", "--out", "run"], cwd)

acc = event_accumulator.EventAccumulator(os.path.join(cwd, "run", "tensorboard"),
                                         size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
expected = {"loss/train", "loss/val", "perplexity/val", "top1/val", "bits_per_byte/val", "lr", "grad_norm",
            "tokens_per_s"}
check(set(tags["scalars"]) == expected, f"scalar tags {sorted(tags['scalars'])}, expected {sorted(expected)}")
check(tags["tensors"] == ["settings"], f"tensor tags {tags['tensors']}, expected ['settings']")


def series(tag):
    return {e.step: e.value for e in acc.Scalars(tag)}


with open(os.path.join(cwd, "run", "log.csv")) as f:
    rows = {int(r["step"]): r for r in csv.DictReader(f)}
check(sorted(rows) == [1, 2, 3, 4], f"log.csv steps {sorted(rows)}")
for tag, column in (("loss/train", "train_loss"), ("lr", "lr"), ("tokens_per_s", "tokens_per_s")):
    got = series(tag)
    check(sorted(got) == [1, 2, 3, 4], f"{tag}: steps {sorted(got)}")
    for step, row in rows.items():
        want = float(row[column])
        check(math.isclose(got[step], want, rel_tol=1e-4), f"{tag} at step {step}: {got[step]} vs log.csv {want}")
val = series("loss/val")
check(sorted(val) == [2, 4], f"loss/val at steps {sorted(val)}, expected [2, 4]")
for step, loss in val.items():
    check(math.isclose(loss, float(rows[step]["val_loss"]), rel_tol=1e-5), f"loss/val at {step}")
    check(math.isclose(series("perplexity/val")[step], math.exp(loss), rel_tol=1e-5), f"perplexity at {step}")
    check(0 <= series("top1/val")[step] <= 1, f"top-1 at {step} is not a fraction")
check(all(v > 0 and math.isfinite(v) for v in series("grad_norm").values()), "grad_norm not positive and finite")
check(sorted(series("grad_norm")) == [1, 2, 3, 4], "grad_norm: not one per step")

settings = acc.Tensors("settings")
check(len(settings) == 1, f"{len(settings)} settings texts")
check(acc.SummaryMetadata("settings").plugin_data.plugin_name == "text", "settings is not for the text plugin")
text = settings[0].tensor_proto.string_val[0].decode()
for row in ("| settings.lr | 0.003 |", "| model.n_layer | 2 |", "| settings.batch_size | 4 |", "| device | cpu |"):
    check(row in text, f"settings text lacks {row!r}:\n{text}")
print(f"tensorboard {tensorboard.__version__}: {len(expected)} scalars and the settings text read back; "
      f"loss/val {val}")

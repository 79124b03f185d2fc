"""Training and validation loss curves of runs' --log-jsonl files, as one PNG.

  python3 bench/plot_loss_curves.py OUT.png LABEL=FILE.jsonl [LABEL=FILE.jsonl ...]

Training points are the logged iterations ("consumed_samples" rows), validation points the
"split": "validation" rows (the first of each iteration: the periodic evaluation). Needs matplotlib (Debian: python3-matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    train, valid = [], []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("lm_loss") is None:
                continue
            if row.get("split") == "validation":
                # The periodic evaluation; the final one over the whole split, at the same
                # iteration, is left out of the curve.
                if not valid or valid[-1][0] != row["iteration"]:
                    valid.append((row["iteration"], row["lm_loss"]))
            elif "consumed_samples" in row:
                train.append((row["iteration"], row["lm_loss"]))
    return train, valid


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    fig, (ax_train, ax_valid) = plt.subplots(1, 2, figsize=(11, 4))
    for spec in sys.argv[2:]:
        label, path = spec.split("=", 1)
        train, valid = read(path)
        if train:
            ax_train.plot(*zip(*train), label=label, linewidth=1)
        if valid:
            ax_valid.plot(*zip(*valid), marker="o", markersize=3, label=label, linewidth=1)
    for ax, title in ((ax_train, "training loss"), (ax_valid, "validation loss")):
        ax.set_xlabel("iteration")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)


if __name__ == "__main__":
    main()

"""Write configs/dilation/<arch>_k<k>.yaml: the OCE dilation grid, one file per (architecture, k).

k = 1 uses the width below; k > 1 sets ``match_budget: true`` so that the task shrinks
``hidden_dim`` at start until metanet + decoder(k) fit the k = 1 parameter count (both counts
are printed). Run from the repository root: ``python configs/generate_dilation.py``.
"""
from pathlib import Path

ARCHITECTURES = {  # the k = 1 reference configurations
    "gmn": {"hidden_dim": 128, "num_layers": 4, "dropout": 0.0},
    "ng_gnn": {"hidden_dim": 64, "num_layers": 4, "dropout": 0.0},
    "ng_t": {"hidden_dim": 64, "num_layers": 4, "dropout": 0.0},
    "nft": {"hidden_dim": 64, "num_layers": 4, "dropout": 0.0},
    "dws": {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0},
    "nfn_hnp": {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0},
    "nfn_np": {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0},
}
KS = (1, 2, 4, 8)

TEMPLATE = """\
# INR dilation (MNIST SIREN 2-32-32-1, 3x3 dilation target, pixel MSE) with {arch}, k={k}.
# {budget}
seed_everything: 0
model:
  class_path: neuralgraph.training.tasks.InrEditing
  init_args:
    metanet: {arch}
    metanet_config: {{{config}}}
    k: {k}
    edit: dilation
    match_budget: {match}
data:
  root: data/inrs
  batch_size: 32
trainer:
  max_epochs: 150
"""


def main() -> None:
    out = Path(__file__).with_name("dilation")
    out.mkdir(exist_ok=True)
    for arch, config in ARCHITECTURES.items():
        for k in KS:
            budget = ("Reference width (k = 1)." if k == 1 else
                      "hidden_dim below is the k = 1 reference; match_budget shrinks it at start.")
            text = TEMPLATE.format(arch=arch, k=k, budget=budget, match=str(k > 1).lower(),
                                   config=", ".join(f"{key}: {value}" for key, value in config.items()))
            (out / f"{arch}_k{k}.yaml").write_text(text)


if __name__ == "__main__":
    main()

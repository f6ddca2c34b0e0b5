"""The config grids derived from the registry: what ``configs/benchmarks/dilation/`` holds, computed.

The dilation grid holds every registered architecture (:data:`neuralgraph.nn.METANETS`) at its
declared :attr:`~neuralgraph.nn.base.Metanet.reference_config` for k = 1, 2, 4, 8. k = 1 uses its
width; k > 1 gives it as ``reference_hidden_dim`` instead, so that the task picks ``hidden_dim`` at
start, the largest width at which metanet + decoder(k) fit the k = 1 parameter count, and stores it
in the checkpoint. Each config checkpoints and logs in its own ``runs/<its name>``
(``runs/benchmarks/dilation/gmn_k4``), so ``--ckpt_path last`` of one config never resumes another's
run. ``paper/`` holds the systems of the paper's dilation table at their published sizes
(:data:`PAPER`, sources in docs/architectures.md). ``python scripts/generate_dilation.py`` writes
both into ``neuralgraph/configs/benchmarks/dilation``; a test checks the shipped files against
:func:`dilation_grid`.
"""
from __future__ import annotations

KS = (1, 2, 4, 8)
#: The grid's folder under ``configs/``, and the name of every config in it (``benchmarks/dilation/gmn_k4``).
FOLDER = "benchmarks/dilation"

#: The paper's dilation table, row name -> (metanet, k = 1 configuration, where the sizes come from).
PAPER = {
    "nft": ("nft", {"hidden_dim": 64, "num_layers": 4, "dropout": 0.0},
            "no published dilation config found; this repository's NFT defaults"),
    "np_nfn": ("nfn_np", {"hidden_dim": 128, "num_layers": 3, "dropout": 0.0, "fourier_features": 128,
                          "fourier_scale": 3.0},
               "mkofinas/neural-graphs experiments/style_editing/configs/model/nfn.yaml"),
    "ng_gnn64": ("ng_gnn", {"hidden_dim": 128, "num_layers": 4, "dropout": 0.2, "probe_features": 64},
                 "mkofinas/neural-graphs style_editing pna.yaml, mnist_dilation_gnn.sh, 64 probes"),
    "ng_t64": ("ng_t", {"hidden_dim": 64, "num_layers": 4, "num_heads": 4, "dropout": 0.3, "fourier_features": 128,
                        "fourier_scale": 3.0, "probe_features": 64},
               "mkofinas/neural-graphs style_editing rtransformer.yaml, mnist_dilation_rt.sh, 64 probes"),
    "scalegmn_b": ("scalegmn_b", {"hidden_dim": 128, "num_layers": 10, "dropout": 0.1},
                   "jkalogero/scalegmn configs/mnist_editing/scalegmn_bidir.yml"),
    "scalegmn_b_gradmetanet": ("scalegmn_b", {"hidden_dim": 128, "num_layers": 10, "dropout": 0.1,
                                              "gradient_features": 64},
                               "scalegmn_bidir.yml + gradients at 64 points (GradMetaNet, arXiv:2507.01649)"),
    "gmn_gradmetanet": ("gmn", {"hidden_dim": 128, "num_layers": 10, "dropout": 0.1, "gradient_features": 64},
                        "the OCE GMN + gradients at 64 points"),
    "dws": ("dws", {"hidden_dim": 32, "num_layers": 4, "dropout": 0.1},
            "dayanadir/capacity_increase_inr_editing_experiment README (feat=1) and inr_editing.yaml"),
    "gmn": ("gmn", {"hidden_dim": 128, "num_layers": 10, "dropout": 0.1},
            "dayanadir/capacity_increase_inr_editing_experiment README (feat=1) and inr_editing.yaml"),
}

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
    edit: dilation{reference}
data:
  root: data/inrs
  batch_size: 32
trainer:
  max_epochs: 150
  default_root_dir: {root_dir}
"""


def config_text(arch: str, config: dict, k: int, root_dir: str) -> str:
    """One dilation config.

    Args:
        arch: the registered metanetwork.
        config: its k = 1 configuration; at k > 1 its ``hidden_dim`` becomes ``reference_hidden_dim``.
        k: output networks.
        root_dir: the run's ``trainer.default_root_dir``.

    Returns:
        The YAML text, under two comment lines saying what it runs.
    """
    if k == 1:
        budget, reference = "The reference width (k = 1).", ""
    else:
        width = config["hidden_dim"]
        config = {key: value for key, value in config.items() if key != "hidden_dim"}
        budget = f"Budget-matched to the k = 1 model (hidden_dim {width}): hidden_dim is chosen at start, then stored."
        reference = f"\n    reference_hidden_dim: {width}"
    return TEMPLATE.format(arch=arch, k=k, budget=budget, reference=reference, root_dir=root_dir,
                           config=", ".join(f"{key}: {value}" for key, value in config.items()))



def dilation_grid() -> dict[str, str]:
    """The dilation grid of every registered architecture, from its declared reference configuration.

    Returns:
        ``{"<arch>_k<k>.yaml": text}``, relative to ``configs/benchmarks/dilation``.
    """
    from neuralgraph.nn import METANETS

    return {f"{arch}_k{k}.yaml": config_text(arch, dict(cls.reference_config), k, f"runs/{FOLDER}/{arch}_k{k}")
            for arch, cls in METANETS.items() for k in KS}


def paper_grid() -> dict[str, str]:
    """The paper's dilation rows at their published sizes (:data:`PAPER`).

    Returns:
        ``{"paper/<row>_k<k>.yaml": text}``, relative to ``configs/benchmarks/dilation``.
    """
    return {f"paper/{row}_k{k}.yaml": f"# Paper row {row}: {source}.\n"
            + config_text(arch, config, k, f"runs/{FOLDER}/paper/{row}_k{k}")
            for row, (arch, config, source) in PAPER.items() for k in KS}

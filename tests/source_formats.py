"""Small folders in the released datasets' own formats, and independent forwards of their conventions.

Each writer follows the public loader's file names, keys and layouts (DWSNets'
``generate_data_splits.py`` / ``INRDataset``, NFN's ``SirenDataset`` and ``ZooDataset``,
neural-graphs' ``generate_cnn_park_splits.py`` / ``CNNParkCIFAR10``); the forwards follow each
source's own model code (DWSNets' ``INR``, NFN's ``Siren``, a Keras CNN, neural-graphs' ``CNN``),
written here without the package's render or modules.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


# -- INRs --------------------------------------------------------------------------------------
def dws_forward(weights, biases, size=28) -> Tensor:
    """DWSNets' ``INR``: ``seq(x) + 0.5`` on ``make_coordinates`` (``np.meshgrid``, 'xy')."""
    axis = np.linspace(-1, 1, size)
    x, y = np.meshgrid(axis, axis)
    h = torch.from_numpy(np.stack([x.flatten(), y.flatten()]).T).double()
    for l, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w.double().T + b.double()
        if l < len(weights) - 1:
            h = torch.sin(30.0 * h)
    return (h + 0.5).view(size, size)


def nfn_forward(weights, biases, size=28) -> Tensor:
    """NFN's ``Siren`` (outermost linear, no offset) on ``get_mgrid`` ('ij'), mapped from [-1, 1] to [0, 1]."""
    axis = torch.linspace(-1, 1, size, dtype=torch.float64)
    h = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), dim=-1).reshape(-1, 2)
    for l, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w.double().T + b.double()
        if l < len(weights) - 1:
            h = torch.sin(30.0 * h)
    return ((h + 1) / 2).view(size, size)


def dws_to_nfn(weights, biases):
    """The NFN SIREN computing the same image as a DWS INR: inputs swapped ('xy' -> 'ij'), the
    output doubled (``2 (g + 0.5) - 1 = 2 g``)."""
    weights, biases = [w.clone() for w in weights], [b.clone() for b in biases]
    weights[0] = weights[0][:, [1, 0]]
    weights[-1], biases[-1] = 2 * weights[-1], 2 * biases[-1]
    return weights, biases


def write_dws_inrs(root: Path, inrs, fashion=False) -> dict:
    """``inrs``: ``(mnist split, label, mnist index, weights, biases)``; writes each INR where
    DWSNets' fitting script does, and returns the split JSON DWSNets' script would write."""
    table = {"train": {"path": [], "label": []}, "test": {"path": [], "label": []}}
    for k, (split, label, index, weights, biases) in enumerate(inrs):
        state = {}
        for l, (w, b) in enumerate(zip(weights, biases)):
            state[f"seq.{l}.weight"], state[f"seq.{l}.bias"] = w.float(), b.float()
        if fashion:
            path = root / f"model_{k}.pth"
            state["label"] = label
        else:
            path = root / f"mnist_png_{'training' if split == 'train' else 'testing'}_{label}_{index}" / "checkpoints" \
                / "model_final.pth"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)
        table[split]["path"].append(str(path.resolve()))
        table[split]["label"].append(str(label))
    return table


def write_nfn_sirens(root: Path, inrs, prefix="randinit_smaller") -> None:
    """``inrs``: ``(label, weights, biases)`` in index order: ``net{idx}.pth`` in ``{prefix}_{label}s``."""
    for idx, (label, weights, biases) in enumerate(inrs):
        folder = root / f"{prefix}_{label}s"
        folder.mkdir(parents=True, exist_ok=True)
        state = {}
        for l, (w, b) in enumerate(zip(weights, biases)):
            key = f"net.{l}.linear" if l < len(weights) - 1 else f"net.{l}"
            state[f"{key}.weight"], state[f"{key}.bias"] = w.float(), b.float()
        torch.save(state, folder / f"net{idx}.pth")


# -- Small CNN Zoo -------------------------------------------------------------------------------
ZOO_VARNAMES = ("sequential/conv2d", "sequential/conv2d_1", "sequential/conv2d_2", "sequential/dense")


def keras_layers(rng: np.random.Generator, channels=16, classes=10):
    """One network's TF-layout parameters: conv kernels ``(3, 3, in, out)``, dense ``(in, out)``."""
    shapes = [(3, 3, 1, channels), (3, 3, channels, channels), (3, 3, channels, channels), (channels, classes)]
    return [(rng.normal(0, 0.3, shape).astype(np.float32), rng.normal(0, 0.1, shape[-1]).astype(np.float32))
            for shape in shapes]


def keras_forward(layers, images: np.ndarray, activation: str) -> np.ndarray:
    """Keras' CNN on NHWC ``images``: 3x3 'valid' convolutions, stride 2, ``activation``, global
    average pooling, dense; written with explicit loops over the kernel taps."""
    act = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh}[activation]
    h = images.astype(np.float64)
    for kernel, bias in layers[:-1]:
        out = (h.shape[1] - 3) // 2 + 1, (h.shape[2] - 3) // 2 + 1
        z = np.zeros((h.shape[0], *out, kernel.shape[-1]))
        for i in range(3):
            for j in range(3):
                patch = h[:, i:i + 2 * out[0]:2, j:j + 2 * out[1]:2, :]
                z += patch @ kernel[i, j].astype(np.float64)
        h = act(z + bias)
    kernel, bias = layers[-1]
    return h.mean(axis=(1, 2)) @ kernel.astype(np.float64) + bias


def write_small_cnn_zoo(root: Path, networks: int, steps=(0, 86), seed=0, activations=("relu", "tanh"),
                        split_file: bool = True):
    """A zoo folder: ``weights.npy`` rows (network x step), ``layout.csv``, ``metrics.csv.gz`` and,
    with ``split_file``, an order file as NFN ships it (a first line ``0``, then a permutation).
    Returns the TF-layout parameters and activation of every row."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    rows, params = [], []
    for n in range(networks):
        activation = activations[n % len(activations)]
        for step in steps:
            layers = keras_layers(rng)
            flat = np.concatenate([np.concatenate([b, k.ravel()]) for k, b in layers])
            rows.append({"config.activation": activation, "config.learning_rate": f"{rng.uniform(1e-4, 1e-2):.6f}",
                         "modeldir": f"/zoo/{n:05d}", "step": step, "test_accuracy": f"{rng.uniform(0.1, 0.9):.6f}",
                         "test_loss": f"{rng.uniform(0.5, 2):.6f}", "train_accuracy": f"{rng.uniform(0.1, 0.9):.6f}",
                         "train_loss": f"{rng.uniform(0.5, 2):.6f}"})
            params.append((layers, activation, flat))
    np.save(root / "weights.npy", np.stack([p[2] for p in params]))
    lines, start = ["varname,start_idx,end_idx,shape"], 0
    for name, (kernel, bias) in zip(ZOO_VARNAMES, params[0][0]):
        lines.append(f"{name}/bias:0,{start},{start + bias.size},\"{tuple(bias.shape)}\"")
        start += bias.size
        lines.append(f"{name}/kernel:0,{start},{start + kernel.size},\"{tuple(kernel.shape)}\"")
        start += kernel.size
    (root / "layout.csv").write_text("\n".join(lines) + "\n")
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    (root / "metrics.csv.gz").write_bytes(gzip.compress(text.getvalue().encode()))
    if split_file:
        order = np.random.default_rng(seed + 1).permutation(len(rows))
        (root / "zoo_split.csv").write_text("0\n" + "\n".join(map(str, order)) + "\n")
    return [(p[0], p[1]) for p in params]


# -- CNN Wild Park -------------------------------------------------------------------------------
PARK_ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
                    "leaky_relu": torch.nn.functional.leaky_relu, "none": lambda z: z}


def park_config(channels, kernels, residual, activation, classes=10) -> dict:
    """neural-graphs' ``CNNConfig`` as its checkpoints hold it: stride 1, padding ``k // 2``."""
    return {"n_layers": len(kernels), "n_classes": classes, "channels": list(channels), "kernel_size": list(kernels),
            "stride": [1] * len(kernels), "padding": [k // 2 for k in kernels], "residual": list(residual),
            "activation": list(activation)}


def park_state(config: dict, rng: np.random.Generator) -> dict:
    """A ``CNN.state_dict()``: ``layers.{i}.weight/bias`` for the convolutions, ``fc.weight/bias``."""
    state, channels = {}, config["channels"]
    for i, k in enumerate(config["kernel_size"]):
        fan_in = channels[i] * k * k
        shape = (channels[i + 1], channels[i], k, k)
        state[f"layers.{i}.weight"] = torch.from_numpy(rng.normal(0, fan_in ** -0.5, shape))
        state[f"layers.{i}.bias"] = torch.from_numpy(rng.normal(0, 0.1, channels[i + 1]))
    state["fc.weight"] = torch.from_numpy(rng.normal(0, channels[-1] ** -0.5, (config["n_classes"], channels[-1])))
    state["fc.bias"] = torch.from_numpy(rng.normal(0, 0.1, config["n_classes"]))
    return {key: value.float() for key, value in state.items()}


def park_forward(state: dict, config: dict, images: Tensor) -> Tensor:
    """neural-graphs' ``CNN.forward`` in float64: each convolution, the first ``min`` shared channels of
    ``residual[i]``'s saved output added before ``activation[i]``, global average pooling, ``fc``."""
    x, saved = images.double(), {}
    for i, r in enumerate(config["residual"]):
        x = torch.nn.functional.conv2d(x, state[f"layers.{i}.weight"].double(), state[f"layers.{i}.bias"].double(),
                                       stride=config["stride"][i], padding=config["padding"][i])
        if r > -1:
            shared = min(config["channels"][r + 1], config["channels"][i + 1])
            x = torch.cat([x[:, :shared] + saved[r][:, :shared], x[:, shared:]], dim=1)
        x = PARK_ACTIVATIONS[config["activation"][i]](x)
        if i in config["residual"]:
            saved[i] = x
    return x.mean(dim=(2, 3)) @ state["fc.weight"].double().T + state["fc.bias"].double()


def write_cnn_wild_park(root: Path, configs, split_of_run, steps=(5, 10), seed=0) -> dict:
    """One run per config in ``configs``: ``cifar10_zooV2/<trial>/checkpoint_<step>/checkpoint.pt`` at each
    step, holding ``model``, ``optimizer``, ``config``, ``iteration`` and ``last_result``; and
    ``cnn_park_splits.json`` (run ``n`` in split ``split_of_run[n]``, each split's checkpoints shuffled,
    paths relative to ``root``). Returns ``{relative path: (config, state)}``."""
    rng = np.random.default_rng(seed)
    table = {split: {"path": [], "score": [], "step": []} for split in ("train", "val", "test")}
    networks = {}
    for n, config in enumerate(configs):
        for step in steps:
            relative = f"cifar10_zooV2/NN_tune_trainable_{n:05d}/checkpoint_{step:06d}/checkpoint.pt"
            state = park_state(config, rng)
            accuracy = float(rng.uniform(0.1, 0.6))
            optimizer = {"state": {}, "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                                         "weight_decay": 0.0, "params": list(range(len(state)))}]}
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": state, "optimizer": optimizer, "config": config, "iteration": step,
                        "last_result": {"test/acc": accuracy, "test/loss": float(rng.uniform(1, 2))}}, root / relative)
            split = table[split_of_run[n]]
            split["path"].append(relative)
            split["score"].append(accuracy)
            split["step"].append(step)
            networks[relative] = (config, state)
    for split in table.values():
        order = rng.permutation(len(split["path"])).tolist()
        for column in split:
            split[column] = [split[column][k] for k in order]
    save_json(root / "cnn_park_splits.json", table)
    return networks


def save_json(path: Path, table: dict) -> Path:
    path.write_text(json.dumps(table))
    return path

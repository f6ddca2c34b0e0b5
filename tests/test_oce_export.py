"""The one network `edit --export` writes for an OCE editor is deployable by `render` and `edit --inr`."""
import argparse

import pytest
import torch
from conftest import render_atol
from test_training import BUDGET_MATCHED, fit_args

from neuralgraph.commands.edit import add_arguments, load_inr, run, save_inr
from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.graph import mlp_to_graph
from neuralgraph.inr import render
from neuralgraph.nn import merge_ensemble
from neuralgraph.training.cli import run_lightning_cli
from neuralgraph.training.tasks import InrEditing


def edit(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return run(parser.parse_args([str(a) for a in argv]))


def oce_average(task, weights, biases):
    """Mean image of the editor's k output INRs for one input INR."""
    graph = mlp_to_graph([w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases])
    with torch.no_grad():
        members_w, members_b = task.edited_networks(graph)
        return render([w[0] for w in members_w], [b[0] for b in members_b]).mean(0)


def test_the_merged_export_renders_the_oce_average_and_is_editable_again(tiny_inrs, tmp_path):
    cli = run_lightning_cli(fit_args(tiny_inrs, tmp_path, extra=["--model.k", "4", "--test_after_fit", "false"]))
    checkpoint = cli.trainer.checkpoint_callback.best_model_path
    task = InrEditing.load_from_checkpoint(checkpoint, weights_only=True).eval()
    merged = tmp_path / "merged.safetensors"
    assert edit("--ckpt", checkpoint, "--index", 2, "--data-root", tiny_inrs, "--out", tmp_path / "a.png",
                "--export", merged) == 0
    weights, biases = load_inr(merged)
    assert [w.shape for w in weights] == [(128, 2), (128, 128), (1, 128)]  # k=4 members of 2-32-32-1
    item = InrDataset(tiny_inrs, "test")[2]
    source_w, source_b = item["weights"], item["biases"]
    torch.testing.assert_close(render(weights, biases), oce_average(task, source_w, source_b), rtol=0,
                               atol=render_atol(weights, biases))

    # the export is an INR like any other: the editor reads its width, and merging again gives k * 128
    twice = tmp_path / "twice.safetensors"
    assert edit("--ckpt", checkpoint, "--inr", merged, "--out", tmp_path / "b.png", "--export", twice) == 0
    again_w, again_b = load_inr(twice)
    assert again_w[0].shape == (512, 2)
    torch.testing.assert_close(render(again_w, again_b), oce_average(task, weights, biases), rtol=0,
                               atol=render_atol(again_w, again_b))

    # what it cannot read is said, with the file or the editor at fault
    deep = tmp_path / "deep.safetensors"
    layout = (2, *[4] * 16, 1)
    save_inr(deep, [torch.randn(o, i) for i, o in zip(layout, layout[1:])], [torch.randn(o) for o in layout[1:]])
    with pytest.raises(ValueError, match=r"the 'gmn' editor of .* cannot read an INR of layout \(2, 4, .*max_layers=16"):
        edit("--ckpt", checkpoint, "--inr", deep, "--out", tmp_path / "c.png")
    colour = tmp_path / "colour.safetensors"
    save_inr(colour, [torch.randn(8, 2), torch.randn(3, 8)], [torch.randn(8), torch.randn(3)])
    with pytest.raises(ValueError, match="colour.safetensors: SIREN layer 2: 3 outputs; a SIREN renders one grey value"):
        edit("--ckpt", checkpoint, "--inr", colour, "--out", tmp_path / "d.png")


def test_render_reads_the_layout_from_the_tensors():
    gen = torch.Generator().manual_seed(0)
    layout, k = (2, 8, 8, 1), 4
    # float64: the merge is an exact identity, checked to float64 rounding
    f64 = dict(generator=gen, dtype=torch.float64)
    members_w = [torch.randn(1, k, o, i, **f64) / i**0.5 for i, o in zip(layout, layout[1:])]
    members_b = [torch.randn(1, k, o, **f64) for o in layout[1:]]
    merged_w, merged_b = merge_ensemble(members_w, members_b)
    assert merged_w[1].shape == (1, 32, 32)
    average = render([w[0] for w in members_w], [b[0] for b in members_b], 9).mean(0)
    torch.testing.assert_close(render(merged_w, merged_b, 9)[0], average, rtol=0,
                               atol=render_atol(merged_w, merged_b, 9))
    with pytest.raises(ValueError, match=r"SIREN layer 2: weight \(1, 32, 31\) is not \[B, d_out, 32\]"):
        render([merged_w[0], merged_w[1][..., :31], merged_w[2]], merged_b)
    with pytest.raises(ValueError, match=r"SIREN layer 3: bias \(1, 2\) does not match weight \(1, 1, 32\)"):
        render(merged_w, [*merged_b[:2], torch.zeros(1, 2)])


@pytest.mark.parametrize("members, width", [("coupled", 64), ("tied", 64)])
def test_decoder_members_train_from_the_config_and_export_one_network(tiny_inrs, tmp_path, members, width):
    """``--model.decoder_members`` reaches the decoder; the export renders what the editor predicts."""
    cli = run_lightning_cli(fit_args(tiny_inrs, tmp_path, extra=[
        "--model.k", "2", "--model.decoder_members", members, *BUDGET_MATCHED,
        "--test_after_fit", "false"]))
    checkpoint = cli.trainer.checkpoint_callback.best_model_path
    task = InrEditing.load_from_checkpoint(checkpoint, weights_only=True).eval()
    assert task.decoder.members == members and task.hparams.decoder_members == members
    merged = tmp_path / "merged.safetensors"
    assert edit("--ckpt", checkpoint, "--index", 1, "--data-root", tiny_inrs, "--out", tmp_path / "a.png",
                "--export", merged) == 0
    weights, biases = load_inr(merged)
    assert weights[1].shape == (width, width)  # two copies of 2-32-32-1: wide (coupled) or merged (tied)
    item = InrDataset(tiny_inrs, "test")[1]
    torch.testing.assert_close(render(weights, biases), oce_average(task, item["weights"], item["biases"]),
                               rtol=0, atol=render_atol(weights, biases))


def test_unknown_decoder_members_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match=r"^InrEditing decoder_members='wide': choose one of independent, coupled, tied$"):
        InrEditing(metanet="gmn", metanet_config={"hidden_dim": 4, "num_layers": 1}, k=2, decoder_members="wide")

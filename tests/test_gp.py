"""General-position audit and quantization: exact tie detection, batching, schemes, errors."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from source_formats import write_dws_inrs
from test_graph import random_mlp
from torch import nn

from neuralgraph.cli import main
from neuralgraph.data import GenerationSettings, InrDataset, make_inrs
from neuralgraph.data.importing import import_dataset
from neuralgraph.graph import GraphConversionError, permute_mlp, random_hidden_permutation
from neuralgraph.theory.gp import INVARIANT_SEPARATORS, SEPARATORS, audit_gp, invariant_tie_matrices, tie_matrices
from neuralgraph.inr import FitConfig
from neuralgraph.theory.quantize import quantize, quantize_mlp

TINY_INRS = GenerationSettings(fit=FitConfig(steps=6), source="embedded", shard_size=2)
small_layouts = st.lists(st.integers(1, 6), min_size=3, max_size=5).map(tuple)


def test_bias_ties_are_reported_by_layer_and_pair():
    weights, biases = random_mlp((2, 4, 3, 1), seed=1)
    biases[0][3] = biases[0][1]
    biases[1][2] = biases[1][0]
    audit = audit_gp(weights, biases)
    assert audit.tied_neurons() == {1: [(1, 3)], 2: [(0, 2)]}
    assert not bool(audit.in_gp[0]) and audit.bias_tied_pairs.tolist() == [2]
    # the rows still tell the tied neurons apart
    assert bool(audit.in_combined_gp[0]) and audit.tied_neurons(combined=True) == {}


def test_only_duplicate_neurons_defeat_all_separators():
    weights, biases = random_mlp((3, 4, 2), seed=2)
    weights[0][2], biases[0][2] = weights[0][0], biases[0][0]
    assert audit_gp(weights, biases).tied_neurons(combined=True) == {}  # outgoing columns differ
    weights[1][:, 2] = weights[1][:, 0]
    audit = audit_gp(weights, biases)
    assert audit.tied_neurons(combined=True) == {1: [(0, 2)]} and not bool(audit.in_combined_gp[0])


def test_norm_separators_tie_where_the_vectors_differ():
    weights = [torch.tensor([[3.0, 4.0], [4.0, 3.0]]), torch.tensor([[1.0, 2.0]])]
    biases = [torch.zeros(2), torch.zeros(1)]
    tied = {s: tie_matrices(weights, biases, (s,))[0][0, 0, 1].item() for s in SEPARATORS}
    assert tied == {
        "bias": True,
        "incoming_row": False,
        "outgoing_column": False,
        "incoming_row_norm": True,
        "outgoing_column_norm": False,
    }


def twin_neurons():
    """Layout 2-2-2 whose hidden neurons tie on every invariant separator but not on their rows and columns."""
    weights = [torch.tensor([[1.0, 2.0], [2.0, 1.0]]), torch.tensor([[1.0, 2.0], [2.0, 1.0]])]
    return weights, [torch.zeros(2), torch.zeros(2)]


# each edit changes one invariant separator of hidden neuron 1 and keeps the other four
ONE_SEPARATOR_EDITS = {
    "bias": lambda w, b: b[0].__setitem__(1, 0.5),
    "incoming_row_sum": lambda w, b: w[0].__setitem__(1, torch.tensor([-2.0, 1.0])),  # norm stays sqrt(5)
    "incoming_row_norm": lambda w, b: w[0].__setitem__(1, torch.tensor([3.0, 0.0])),  # sum stays 3
    "outgoing_column_sum": lambda w, b: w[1][:, 1].copy_(torch.tensor([-2.0, 1.0])),
    "outgoing_column_norm": lambda w, b: w[1][:, 1].copy_(torch.tensor([3.0, 0.0])),
}


def test_invariant_gp_ties_neurons_whose_rows_differ_only_in_order():
    audit = audit_gp(*twin_neurons())
    assert audit.tied_neurons(invariant=True) == {1: [(0, 1)]} and not bool(audit.in_invariant_gp[0])
    assert bool(audit.in_combined_gp[0])  # the whole rows still differ
    with pytest.raises(ValueError, match="tied_neurons: choose combined or invariant, not both"):
        audit.tied_neurons(combined=True, invariant=True)


@pytest.mark.parametrize("separator", INVARIANT_SEPARATORS)
def test_each_invariant_separator_alone_can_decide(separator):
    weights, biases = twin_neurons()
    ONE_SEPARATOR_EDITS[separator](weights, biases)
    separated = {s for s in INVARIANT_SEPARATORS if not tie_matrices(weights, biases, (s,))[0][0, 0, 1]}
    assert separated == {separator}
    assert not invariant_tie_matrices(weights, biases)[0].any() and bool(audit_gp(weights, biases).in_invariant_gp[0])


def test_unknown_separator_and_bad_shapes_are_named():
    weights, biases = random_mlp((2, 3, 1))
    with pytest.raises(ValueError, match="unknown separator 'rank'"):
        tie_matrices(weights, biases, ("rank",))
    with pytest.raises(GraphConversionError, match="layer 2: bias has shape"):
        audit_gp(weights, [biases[0], torch.zeros(2)])


@settings(max_examples=30, deadline=None)
@given(layout=small_layouts, batch=st.integers(1, 5), seed=st.integers(0, 2**16), bits=st.sampled_from([3, 4]))
def test_batched_audit_equals_per_network_and_is_permutation_invariant(layout, batch, seed, bits):
    # coarse quantization makes ties common, so both outcomes are exercised
    weights, biases = quantize_mlp(*random_mlp(layout, batch, seed), bits)
    audit = audit_gp(weights, biases)
    gen = torch.Generator().manual_seed(seed)
    for n in range(batch):
        w, b = [x[n] for x in weights], [x[n] for x in biases]
        single = audit_gp(w, b)
        assert single.bias_tied_pairs.item() == audit.bias_tied_pairs[n].item()
        assert single.combined_tied_pairs.item() == audit.combined_tied_pairs[n].item()
        assert single.invariant_tied_pairs.item() == audit.invariant_tied_pairs[n].item()
        assert single.tied_neurons() == audit.tied_neurons(n)
        assert single.tied_neurons(invariant=True) == audit.tied_neurons(n, invariant=True)
        permuted = audit_gp(*permute_mlp(w, b, random_hidden_permutation(layout, gen)))
        assert permuted.bias_tied_pairs.item() == single.bias_tied_pairs.item()
        assert permuted.combined_tied_pairs.item() == single.combined_tied_pairs.item()
        assert permuted.invariant_tied_pairs.item() == single.invariant_tied_pairs.item()
    # duplicate neurons tie on every scalar, and every invariant tie is a bias tie
    assert (audit.combined_tied_pairs <= audit.invariant_tied_pairs).all()
    assert (audit.invariant_tied_pairs <= audit.bias_tied_pairs).all()
    for combined, invariant, bias in zip(audit.combined_ties, audit.invariant_ties, audit.bias_ties):
        assert not (combined & ~invariant).any() and not (invariant & ~bias).any()


def test_sixteen_bits_is_uniform_unless_ieee_and_thirty_two_keeps_float32():
    t = torch.randn(50, dtype=torch.float32)
    assert torch.equal(quantize(t, 16, ieee=True), t.half().float())
    scale = t.abs().max() / (2**15 - 1)
    assert torch.equal(quantize(t, 16), torch.round(t / scale) * scale)
    assert torch.equal(quantize(t, 32), t)
    with pytest.raises(ValueError, match="layer 1 weight: values up to 7e\\+04 overflow 16-bit"):
        quantize_mlp([torch.full((1, 1), 7e4)], [torch.zeros(1)], 16, granularity="ieee")
    with pytest.raises(ValueError, match="IEEE floats have 16 or 32 bits, not 12"):
        quantize(t, 12, ieee=True)


def test_audit_rows_name_the_scheme_and_refuse_ieee_alone_at_uniform_widths():
    from neuralgraph.commands.audit_gp import audit_rows

    networks = [random_mlp((2, 5, 5, 1), 3)]
    rows = audit_rows(networks, [32, 16, 12], ["tensor", "ieee"], chunk=8)
    assert [(r.bits, r.granularity) for r in rows] == [(32, "tensor"), (16, "tensor"), (16, "ieee"), (12, "tensor")]
    with pytest.raises(ValueError, match="--bits 12: --granularity ieee applies to 16 and 32 bits only"):
        audit_rows(networks, [16, 12], ["ieee"], chunk=8)


@pytest.mark.parametrize("bits", [2, 5, 8, 12])
def test_uniform_quantization_is_symmetric_round_to_nearest(bits):
    t = torch.randn(1000, dtype=torch.float64)
    q = quantize(t, bits)
    levels = 2 ** (bits - 1) - 1
    scale = t.abs().max() / levels
    codes = q / scale
    assert torch.allclose(codes, codes.round(), atol=1e-9) and codes.abs().max().round() == levels
    assert (q - t).abs().max() <= scale / 2 + 1e-12
    assert q.abs().max() == t.abs().max()
    assert torch.equal(quantize(torch.zeros(4), bits), torch.zeros(4))


def test_granularity_sets_which_maximum_fixes_the_scale():
    weights = [torch.tensor([[10.0, -1.0]]), torch.tensor([[1.0]])]
    biases = [torch.tensor([0.3]), torch.tensor([0.0])]
    per_tensor_w, per_tensor_b = quantize_mlp(weights, biases, 3)
    per_layer_w, per_layer_b = quantize_mlp(weights, biases, 3, granularity="layer")
    assert per_tensor_b[0].item() == pytest.approx(0.3)  # its own scale: 0.3 / 3 levels
    assert per_layer_b[0].item() == 0.0  # shared scale 10 / 3 rounds 0.3 to 0
    assert torch.equal(per_tensor_w[0], per_layer_w[0])
    with pytest.raises(ValueError, match="unknown granularity 'network'"):
        quantize_mlp(weights, biases, 3, granularity="network")
    with pytest.raises(ValueError, match="cannot quantize to 1 bits"):
        quantize(weights[0], 1)


@settings(max_examples=20, deadline=None)
@given(layout=small_layouts, batch=st.integers(1, 4), bits=st.sampled_from([4, 8, 16]), granularity=st.sampled_from(["tensor", "layer"]))
def test_batched_quantization_uses_per_network_scales(layout, batch, bits, granularity):
    weights, biases = random_mlp(layout, batch)
    weights[0] = weights[0] * torch.arange(1, batch + 1).view(-1, 1, 1)  # different peaks per network
    qw, qb = quantize_mlp(weights, biases, bits, granularity)
    for n in range(batch):
        sw, sb = quantize_mlp([w[n] for w in weights], [b[n] for b in biases], bits, granularity)
        assert all(torch.equal(a[n], b) for a, b in zip(qw + qb, sw + sb))


def run_audit(capsys, *argv):
    """``neuralgraph --debug audit-gp ...``: errors propagate, so their messages can be matched."""
    assert main(["--debug", "audit-gp", *map(str, argv)]) == 0
    return capsys.readouterr().out


def test_audit_command_on_a_checkpoint_folder(tmp_path, capsys):
    for n in range(3):
        model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
        if n == 0:
            with torch.no_grad():
                model[0].bias.fill_(0.25)  # four equal biases: 6 tied pairs, rows still differ
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if n < 2:
            save_file(state, str(tmp_path / f"net{n}.safetensors"))
        else:
            torch.save(state, tmp_path / f"net{n}.pt")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    table = run_audit(capsys, tmp_path, "--bits", "32", "2", "--granularity", "tensor", "layer").splitlines()
    assert len(table) == 2 + 3  # IEEE widths get one row, uniform widths one per granularity
    assert table[2].startswith("| 32 | IEEE | 3 | 66.67% | 100.00% | 100.00% | 0 | 0 |")
    assert table[3].startswith("| 2 | per tensor | 3 |") and table[4].startswith("| 2 | per layer | 3 |")


def test_audit_command_names_the_file_it_cannot_read(tmp_path, capsys):
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 9, 1))
    save_file({k: v.contiguous() for k, v in conv.state_dict().items()}, str(tmp_path / "conv.safetensors"))
    with pytest.raises(GraphConversionError, match="conv.safetensors: edge_attr has 9 features per edge"):
        run_audit(capsys, tmp_path)
    (tmp_path / "conv.safetensors").unlink()
    (tmp_path / "broken.pt").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="broken.pt: not a readable checkpoint"):
        run_audit(capsys, tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: no INR dataset manifest and no"):
        run_audit(capsys, tmp_path / "empty")


def test_audit_command_on_an_inr_dataset(tmp_path, capsys):
    make_inrs(tmp_path, ("train",), limit=3, settings=TINY_INRS, progress=False)
    table = run_audit(capsys, tmp_path, "--split", "train", "--bits", "32", "8", "--chunk", "2").splitlines()
    dataset = InrDataset(tmp_path, "train")
    expected = audit_gp(*quantize_mlp(dataset.weights, dataset.biases, 8))
    percent = 100 * expected.in_gp.double().mean().item()
    assert table[3].startswith(f"| 8 | per tensor | 3 | {percent:.2f}% |")
    with pytest.raises(ValueError, match="no split 'test'"):
        run_audit(capsys, tmp_path, "--split", "test")


def test_audit_command_up_to_sign_flips(tmp_path, capsys):
    """Biases 0.5 and -0.5 are distinct, but equal up to a sign flip of one neuron."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].bias.copy_(torch.tensor([0.5, -0.5]))
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "net.safetensors"))
    assert run_audit(capsys, tmp_path, "--bits", "32").splitlines()[2].startswith("| 32 | IEEE | 1 | 100.00% |")
    assert run_audit(capsys, tmp_path, "--bits", "32", "--group", "sign").splitlines()[2].startswith(
        "| 32 | IEEE | 1 | 0.00% |")


def test_audit_command_on_an_imported_dws_folder(tmp_path, capsys):
    """A folder of import-dataset dws-inrs has no images, PSNRs or fitting steps: only weights are read."""
    inrs = []
    for k in range(4):
        weights, biases = random_mlp((2, 8, 8, 1), seed=k)
        if k % 2:
            biases[0][:4] = 0.125  # four equal first-layer biases: bias GP fails, the rows still separate
        inrs.append(("train", k, k, weights, biases))
    write_dws_inrs(tmp_path / "dws", inrs)
    import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", images="none", progress=False)
    dataset = InrDataset(tmp_path / "out", "train")
    assert dataset.images is None and dataset.psnrs is None and dataset.steps is None
    table = run_audit(capsys, tmp_path / "out", "--bits", "32", "8", "--chunk", "3").splitlines()
    assert table[2].startswith("| 32 | IEEE | 4 | 50.00% | 100.00% | 100.00% |")
    expected = audit_gp(*quantize_mlp(dataset.weights, dataset.biases, 8))
    percents = [100 * x.double().mean().item() for x in (expected.in_gp, expected.in_combined_gp, expected.in_invariant_gp)]
    assert table[3].startswith("| 8 | per tensor | 4 | " + " | ".join(f"{p:.2f}%" for p in percents) + " |")

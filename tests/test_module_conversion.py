"""module_to_graph reads the module's data flow (torch.fx): layers, residual adds as skip edges,
activations as a node field; round trips compute the same outputs and what it cannot convert is named."""
import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch

from neuralgraph.graph import (
    SHORTCUT_EDGE,
    SKIP_EDGE,
    WEIGHT_EDGE,
    Activation,
    GraphConversionError,
    GraphSpec,
    activation_codes,
    blocks_to_graph,
    fold_batchnorm,
    graph_shortcuts,
    graph_skips,
    graph_to_blocks,
    graph_to_mlp,
    graph_to_module,
    module_to_graph,
)
from neuralgraph.inr import DWS_MNIST, Siren


class DeclaredBackwards(nn.Module):
    """Attributes declared output first: ``named_modules`` order is not the data flow."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(3, 1)
        self.inp = nn.Linear(2, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.inp(x)))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(2, 3), nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(h + torch.relu(self.b(h)))


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.left, self.right = nn.Linear(2, 3), nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x):
        h = self.body(x)
        return self.left(h) * self.right(h)


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x):
        return self.layer(torch.relu(self.layer(x)))


class LooseParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.layer(x) * self.scale


class UnusedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer, self.head = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        return self.layer(x)


class FlattenByView(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        return self.fc(h.view(h.size(0), -1))


def test_layers_follow_the_data_flow_not_the_declaration_order():
    torch.manual_seed(0)
    module = DeclaredBackwards()
    graph = module_to_graph(module)
    assert graph.layout == (2, 3, 1)
    weights, biases = graph_to_mlp(graph)
    assert torch.equal(weights[0], module.inp.weight) and torch.equal(weights[1], module.out.weight)
    inputs = torch.randn(5, 2)
    assert torch.equal(graph_to_module(graph, DeclaredBackwards())(inputs), module(inputs))
    assert graph.architecture[1] == "tanh(x)"


def test_a_state_dict_out_of_data_flow_order_is_refused():
    with pytest.raises(GraphConversionError, match="'inp.weight' reads 2 features but 'out.weight' gives 1"):
        module_to_graph(DeclaredBackwards().state_dict())


@pytest.mark.parametrize("module,message", [
    (nn.Sequential(nn.Linear(2, 3), nn.Linear(6, 1)), r"layer '1' \(Linear\) cannot run on inputs of shape \(2, 3\)"),
    (TwoHeads(), r"layer 'body' \(Linear\) feeds 2 nodes \('left', 'right'\)"),
    (Shared(), r"layer 'layer' \(Linear\) is called more than once"),
    (LooseParameter(), r"parameter 'scale' \(LooseParameter\) is read outside a converted layer"),
    (UnusedHead(), r"layer 'head' \(Linear\) is not called as a layer by forward"),
])
def test_what_the_chain_walk_cannot_convert_is_named(module, message):
    with pytest.raises(GraphConversionError, match=message):
        module_to_graph(module)


class InputSkip(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + x


@pytest.mark.parametrize("make,layout,skips", [(Residual, (2, 3, 3, 1), ((1, 2),)), (InputSkip, (2, 2, 2), ((0, 2),))])
def test_a_residual_add_becomes_identity_skip_edges_and_round_trips(make, layout, skips):
    torch.manual_seed(0)
    module = make()
    graph = module_to_graph(module)
    assert graph.layout == layout and graph_skips(graph) == skips
    skip = graph.edge_kind == SKIP_EDGE
    (a, b), = skips
    assert int(skip.sum()) == layout[b] and bool((graph.edge_layer[skip] == b - 1).all())
    src, dst = graph.edge_index[:, skip]
    assert torch.equal(graph.node_layer[src], torch.full_like(src, a)) and torch.equal(graph.node_index[src], graph.node_index[dst])
    assert torch.equal(graph.edge_attr[skip], torch.ones(layout[b], 1))
    inputs = torch.randn(7, 2)
    assert torch.equal(graph_to_module(graph, make())(inputs), module(inputs))


class Merges(nn.Module):
    """Residual-looking merges the graph cannot record, chosen by ``kind``."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.a, self.b, self.c = nn.Linear(2, 3), nn.Linear(3, 3), nn.Linear(3, 1)
        self.down, self.b2 = nn.Linear(3, 1), nn.Linear(3, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.kind == "concat":
            return torch.cat([h, self.b(h)], 1)
        if self.kind == "multiply":
            return h * self.b(h)
        if self.kind == "broadcast":
            return self.down(h) + h
        if self.kind == "transformed skip":
            return self.b2(torch.relu(self.b(h))) + torch.tanh(h)
        if self.kind == "same layer":
            return self.c(h + 2 * h)
        return self.c(h + self.b(h) + h)  # "twice"


@pytest.mark.parametrize("kind,message", [
    ("concat", r"node 'cat' combines 'relu', 'b': a merge other than a residual add"),
    ("multiply", r"node 'mul' combines 'relu', 'b'"),
    ("broadcast", r"node 'add' adds 'relu' \(2, 3\) to 'down' \(2, 1\): a residual connection needs equal shapes"),
    ("transformed skip", r"node 'relu' feeds 2 nodes \('b', 'tanh'\): a branch or skip connection that does not end"),
    ("same layer", r"node 'add' adds 'relu' to 'mul', two values of layer 1 with no layer between them"),
    ("twice", r"node 'add_1' adds a second skip from layer 1 to layer 2"),
])
def test_merges_the_graph_cannot_record_are_named(kind, message):
    with pytest.raises(GraphConversionError, match=message):
        module_to_graph(Merges(kind))


def test_a_graph_with_skips_refuses_a_template_without_them_and_checks_its_identity_edges():
    torch.manual_seed(0)
    graph = module_to_graph(Residual())

    class NoSkip(Residual):
        def forward(self, x):
            return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

    with pytest.raises(GraphConversionError, match=r"graph has residual skips \[\(1, 2\)\] .* but the template has \[\]"):
        graph_to_module(graph, NoSkip())
    with pytest.raises(GraphConversionError, match=r"residual skip or shortcut edges \(edge_kind\): not a plain MLP"):
        graph_to_mlp(graph)
    graph.edge_attr[graph.edge_kind == SKIP_EDGE] = 2.0
    with pytest.raises(GraphConversionError, match="skip edges from layer 1 to layer 2 hold features other than the identity"):
        graph_to_module(graph, Residual())


def test_untraceable_forward_and_tuple_output_are_named():
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def forward(self, x):
            return self.layer(x) if x.sum() > 0 else x

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def forward(self, x):
            return self.layer(x), x

    with pytest.raises(GraphConversionError, match="DataDependent: torch.fx cannot trace forward"):
        module_to_graph(DataDependent())
    with pytest.raises(GraphConversionError, match=r"Pair.forward returns \(layer, x\), not the single tensor"):
        module_to_graph(Pair())


def test_flatten_by_view_and_functional_activations_convert_exactly():
    torch.manual_seed(0)
    module = FlattenByView()
    graph = module_to_graph(module)  # probe: the one square image size (6x6) that runs through
    assert graph.layout == (1, 2, 3) and graph.edge_attr.shape == (2 + 6, 16)
    assert graph.architecture[1:3] == ("relu(x)", "view(x, size, -1)")
    images = torch.randn(3, 1, 6, 6)
    assert torch.equal(graph_to_module(graph, FlattenByView())(images), module(images))


def test_siren_converts_with_its_sine_frequency_recorded():
    siren = Siren(DWS_MNIST)
    graph = module_to_graph(siren)
    assert graph.layout == DWS_MNIST.layout
    assert graph.architecture.count("mul(30.0, x)") == 2 and graph.architecture.count("sin(x)") == 2


def conv_net(stride=1, padding=0, dilation=1):
    return nn.Sequential(nn.Conv2d(1, 3, 3, stride=stride, padding=padding, dilation=dilation), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 2))


@pytest.mark.parametrize("setting", [{"stride": 2}, {"padding": 1}, {"dilation": 2}])
def test_conv_settings_are_recorded_and_a_differing_template_is_refused(setting):
    torch.manual_seed(0)
    module = conv_net()
    graph = module_to_graph(module)
    assert graph.architecture[0].startswith("Conv2d(1, 3, kernel_size=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1)")
    name, value = next(iter(setting.items()))
    with pytest.raises(GraphConversionError, match=rf"differs from the graph's at step 1: .*template .*{name}=\({value}, {value}\)"):
        graph_to_module(graph, conv_net(**setting))
    images = torch.randn(2, 1, 9, 9)
    assert torch.equal(graph_to_module(graph, conv_net())(images), module(images))
    del graph.architecture  # the documented way to load into another architecture on purpose
    assert graph_to_module(graph, conv_net(**setting)).state_dict().keys() == module.state_dict().keys()


def test_example_input_is_the_probe():
    torch.manual_seed(0)
    module = conv_net(stride=2)
    graph = module_to_graph(module, example_input=torch.randn(4, 1, 11, 11))
    assert graph.layout == (1, 3, 2)
    with pytest.raises(GraphConversionError, match=r"layer '0' \(Conv2d\) cannot run on inputs of shape \(4, 2, 5, 5\)"):
        module_to_graph(module, example_input=torch.randn(4, 2, 5, 5))
    with pytest.raises(GraphConversionError, match="example_input is list"):
        module_to_graph(module, example_input=[1.0])


def test_a_converter_that_loses_weights_fails_the_probe_check():
    """A registered converter whose from_block scrambles weights is caught by the rebuilt-module check."""
    from neuralgraph.graph import LayerConverter, register_converter

    class Scrambled(nn.Linear):
        pass

    @register_converter(Scrambled)
    class ScrambledConverter(LayerConverter):
        def to_block(self, weight, bias, in_neurons):
            return weight.unsqueeze(-1)

        def from_block(self, block, like):
            return block.reshape(like.shape).flip(0)

        def input_shapes(self, module):
            return [(module.in_features,)]

    with pytest.raises(GraphConversionError, match="rebuilt from its graph computes another output"):
        module_to_graph(nn.Sequential(Scrambled(2, 3), nn.ReLU(), nn.Linear(3, 1)))


class _ConvBnNet(nn.Module):
    """Two convolutions of different kernel sizes with BatchNorm, pooled into a classifier."""

    def __init__(self, bn_after_activation: bool = False):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 5, padding=1), nn.BatchNorm2d(8)
        self.pool, self.flatten, self.linear = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
        self.bn3 = nn.BatchNorm2d(8) if bn_after_activation else nn.Identity()

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.linear(self.flatten(self.pool(self.bn3(x))))


def _with_running_statistics(net: nn.Module) -> nn.Module:
    generator = torch.Generator().manual_seed(0)
    for bn in (m for m in net.modules() if isinstance(m, nn.BatchNorm2d)):
        for tensor, low in ((bn.running_mean, -1), (bn.running_var, 0.5), (bn.weight.data, -1), (bn.bias.data, -1)):
            tensor.copy_(torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype) * 1.5 + low)
    return net.eval()


def test_batchnorm_folds_into_mixed_kernel_convolutions_and_round_trips():
    torch.manual_seed(0)
    net = _with_running_statistics(_ConvBnNet().double())
    folded = fold_batchnorm(net)
    x = torch.randn(4, 1, 16, 16, dtype=torch.float64)
    graph = module_to_graph(folded, x)
    assert graph.edge_attr.shape[1] == 25  # the 3x3 kernels are zero-padded to the 5x5 ones
    rebuilt = graph_to_module(graph, folded, x)
    torch.testing.assert_close(rebuilt(x), net(x), rtol=1e-10, atol=1e-10)


def test_batchnorm_folding_errors():
    with pytest.raises(GraphConversionError, match="_ConvBnNet is in training mode: .* call .eval"):
        fold_batchnorm(_ConvBnNet())
    with pytest.raises(GraphConversionError, match="layer 'bn3' \\(BatchNorm2d\\) does not directly follow a conv"):
        fold_batchnorm(_with_running_statistics(_ConvBnNet(bn_after_activation=True)))
    net = _ConvBnNet().eval()
    net.bn1 = nn.BatchNorm2d(8, track_running_stats=False)
    with pytest.raises(GraphConversionError, match="layer 'bn1' \\(BatchNorm2d\\) tracks no running statistics"):
        fold_batchnorm(net)


@pytest.mark.parametrize("norm", [nn.BatchNorm2d(8), nn.BatchNorm2d(8, affine=False), nn.SyncBatchNorm(8)])
def test_batchnorm_is_folded_in_eval_mode_and_refused_in_training_mode(norm):
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3), norm, nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))
    with pytest.raises(GraphConversionError, match=r"^Sequential is in training mode: BatchNorm is folded with its "
                                                   r"running statistics at inference; call .eval\(\) first$"):
        module_to_graph(cnn)
    cnn.eval()
    graph = module_to_graph(cnn)
    assert graph.layout == (1, 8, 2)
    assert torch.equal(graph.edge_attr, module_to_graph(fold_batchnorm(cnn)).edge_attr)
    x = torch.randn(3, 1, 6, 6)
    rebuilt = graph_to_module(graph, copy.deepcopy(cnn), example_input=x)
    assert isinstance(rebuilt[1], type(norm))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), cnn(x))


def test_each_layer_records_its_activation_and_a_second_or_unknown_one_is_refused():
    graph = module_to_graph(DeclaredBackwards())
    assert graph.activation.tolist() == activation_codes(["identity"] * 2 + ["tanh"] * 3 + ["identity"]).tolist()
    siren = module_to_graph(Siren(DWS_MNIST))  # sin(30 x): the scaling is no activation, sin is
    names = [list(Activation)[int(graph_code)] for graph_code in siren.activation[torch.cumsum(torch.tensor((0,) + siren.layout[:-1]), 0)]]
    assert names == ["identity", "sine", "sine", "identity"]
    with pytest.raises(GraphConversionError, match=r"node 'tanh' applies tanh after relu \(layer '1' \(ReLU\)\) to the neurons of one layer"):
        module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), *[Lambda(torch.tanh)], nn.Linear(3, 1)))
    with pytest.raises(GraphConversionError, match=r"layer '1' \(Softmax\) is neither an activation of \('identity'"):
        module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.Softmax(-1)))
    with pytest.raises(GraphConversionError, match="activation 'swish' is not in the vocabulary"):
        activation_codes(["relu", "swish"])


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_batched_blocks_with_skips_and_activations_equal_their_single_graphs():
    torch.manual_seed(0)
    layout, B = (2, 3, 3, 3, 1), 4
    weights = [torch.randn(B, d_out, d_in, 1) for d_in, d_out in zip(layout, layout[1:])]
    biases = [torch.randn(B, d) for d in layout[1:]]
    codes = torch.randint(len(Activation), (B, len(layout)))
    projection = torch.randn(B, 3, 2, 4)  # a 2x2 kernel from layer 0 into layer 2: F grows to 4
    batch = blocks_to_graph(weights, biases, skips=[(1, 3)], activations=codes, shortcuts=[(0, 2, projection)])
    singles = [blocks_to_graph([w[i] for w in weights], [b[i] for b in biases], [(1, 3)], codes[i],
                               [(0, 2, projection[i])]) for i in range(B)]
    expected = Batch.from_data_list(singles)
    for key in ("x", "edge_index", "edge_attr", "edge_layer", "edge_kind", "node_layer", "activation", "batch"):
        assert torch.equal(batch[key], expected[key]), key
    for single, again in zip(singles, batch.to_data_list()):
        assert torch.equal(single.edge_kind, again.edge_kind) and torch.equal(single.activation, again.activation)
    assert graph_skips(singles[0]) == ((1, 3),) and torch.equal(graph_shortcuts(singles[0])[(0, 2)], projection[0])
    decoded, decoded_biases = graph_to_blocks(batch)  # weight edges only, as WeightDecoder reads them
    assert all(torch.equal(w[..., :1], v) and not bool(w[..., 1:].any()) for w, v in zip(decoded, weights))
    assert all(torch.equal(b, v) for b, v in zip(decoded_biases, biases))
    singles[0].edge_layer[singles[0].edge_kind == SHORTCUT_EDGE] = 0
    with pytest.raises(GraphConversionError, match="shortcut edges into layer 2 have an edge_layer other than 1"):
        graph_shortcuts(singles[0])
    with pytest.raises(GraphConversionError, match=r"shortcut \(0, 2\): block \(4, 2, 3, 4\), expected \(4, 3, 2, 'f'\)"):
        blocks_to_graph(weights, biases, shortcuts=[(0, 2, projection.transpose(1, 2))])
    with pytest.raises(GraphConversionError, match=r"shortcut \(1, 3\): layers 1 and 3 are joined by a skip or shortcut"):
        blocks_to_graph(weights, biases, skips=[(1, 3)], shortcuts=[(1, 3, torch.randn(B, 3, 3, 1))])
    with pytest.raises(GraphConversionError, match=r"skip \(0, 3\): an identity skip joins layers of equal width, not 2 and 3"):
        blocks_to_graph(weights, biases, skips=[(0, 3)])
    with pytest.raises(GraphConversionError, match=r"activations \(5,\): expected a long tensor \(4, 5\)"):
        blocks_to_graph(weights, biases, activations=codes[0])


def test_mixed_kernel_sizes_round_trip_exactly():
    torch.manual_seed(0)

    def make():
        return nn.Sequential(nn.Conv2d(2, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.GELU(),
                             nn.Conv2d(4, 3, 5, padding=2), nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(3, 2))

    module = make()
    graph = module_to_graph(module)
    assert graph.layout == (2, 4, 4, 3, 2) and graph.edge_attr.shape == (8 + 16 + 12 + 6, 25)
    one, three = graph.edge_attr[:8], graph.edge_attr[8:24]  # kernels in the first kh * kw features, zeros after
    assert torch.equal(one[:, 0], module[0].weight.flatten()) and bool((one[:, 1:] == 0).all())
    assert torch.equal(three[:, :9], module[2].weight.flatten(2).reshape(-1, 9)) and bool((three[:, 9:] == 0).all())
    images = torch.randn(3, 2, 7, 7)
    assert torch.equal(graph_to_module(graph, make())(images), module(images))


class BasicBlock(nn.Module):
    """ResNet's basic block: ``relu(bn2(conv2(relu(bn1(conv1(x))))) + x)``."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))) + x)


class DownBlock(nn.Module):
    """ResNet's downsampling block: stride 2, twice the channels, a 1x1 projection shortcut with BatchNorm
    (computed before or after the main path, which changes the order of the traced nodes)."""

    def __init__(self, channels: int, kernel: int, shortcut_first: bool):
        super().__init__()
        self.shortcut_first = shortcut_first
        self.conv1 = nn.Conv2d(channels, 2 * channels, kernel, stride=2, padding=kernel // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(2 * channels)
        self.conv2 = nn.Conv2d(2 * channels, 2 * channels, kernel, padding=kernel // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * channels)
        self.proj, self.bn_proj = nn.Conv2d(channels, 2 * channels, 1, stride=2, bias=False), nn.BatchNorm2d(2 * channels)

    def forward(self, x):
        if self.shortcut_first:
            shortcut = self.bn_proj(self.proj(x))
        h = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        if not self.shortcut_first:
            shortcut = self.bn_proj(self.proj(x))
        return torch.relu(h + shortcut)


class SmallResNet(nn.Module):
    """A stem convolution with BatchNorm, basic blocks (``(kernel, False)``) or downsampling
    blocks (``(kernel, True)``), global pooling and a classifier."""

    def __init__(self, width: int = 4, blocks: tuple[tuple[int, bool], ...] = ((3, False), (3, True)),
                 shortcut_first: bool = False, classes: int = 10):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width)
        layers = []
        for kernel, down in blocks:
            layers.append(DownBlock(width, kernel, shortcut_first) if down else BasicBlock(width, kernel))
            width *= 2 if down else 1
        self.blocks = nn.Sequential(*layers)
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


@settings(max_examples=8, deadline=None)
@given(width=st.integers(1, 4), blocks=st.lists(st.tuples(st.sampled_from([1, 3, 5]), st.booleans()), max_size=3),
       shortcut_first=st.booleans(), seed=st.integers(0, 2**16))
def test_a_resnet_with_batchnorm_folds_converts_and_round_trips(width, blocks, shortcut_first, seed):
    """Basic blocks give identity skips and exact round trips; a downsampling block's projection
    shortcut gives shortcut edges and its bias joins the main path's (equal up to rounding)."""
    torch.manual_seed(seed)

    def make():
        return fold_batchnorm(_with_running_statistics(SmallResNet(width, tuple(blocks), shortcut_first).double()))

    net = _with_running_statistics(SmallResNet(width, tuple(blocks), shortcut_first).double())
    folded = fold_batchnorm(net)
    images = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    graph = module_to_graph(folded, images)
    widths, skips, shortcuts = [1, width], [], []
    for kernel, down in blocks:
        widths += [widths[-1] * (2 if down else 1)] * 2
        (shortcuts if down else skips).append((len(widths) - 3, len(widths) - 1))
    assert graph.layout == tuple(widths) + (10,)
    assert graph_skips(graph) == tuple(skips) and sorted(graph_shortcuts(graph)) == shortcuts
    kind = getattr(graph, "edge_kind", torch.zeros(0))  # only graphs with skips or shortcuts have the field
    assert int((kind == SHORTCUT_EDGE).sum()) == sum(widths[a] * widths[b] for a, b in shortcuts)
    assert graph.edge_attr.shape[1] == max([9] + [k * k for k, _ in blocks])
    relu, identity = Activation.RELU.code, Activation.IDENTITY.code
    per_layer = [int(graph.activation[graph.node_layer == l][0]) for l in range(len(widths) + 1)]
    assert per_layer == [identity] + [relu] * (len(widths) - 1) + [identity]
    rebuilt = graph_to_module(graph, make(), images)
    inputs = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    if shortcuts:
        torch.testing.assert_close(rebuilt(inputs), folded(inputs), rtol=1e-12, atol=1e-12)
    else:
        assert torch.equal(rebuilt(inputs), folded(inputs))
    torch.testing.assert_close(rebuilt(inputs), net(inputs), rtol=1e-10, atol=1e-10)
    again = module_to_graph(rebuilt, images)  # graph -> module -> graph is exact, shortcut biases included
    assert torch.equal(again.x, graph.x) and torch.equal(again.edge_attr, graph.edge_attr)


def test_a_projection_shortcut_holds_its_kernel_and_a_transformed_one_is_refused():
    torch.manual_seed(0)
    block = fold_batchnorm(_with_running_statistics(SmallResNet(2, ((3, True),)).double()))
    graph = module_to_graph(block)
    (pair, kernel), = graph_shortcuts(graph).items()
    assert pair == (1, 3) and torch.equal(kernel[..., 0], block.get_submodule("blocks.0.proj").weight[..., 0, 0])
    assert bool((kernel[..., 1:] == 0).all())

    class ActivatedShortcut(DownBlock):
        def forward(self, x):
            return self.conv2(torch.relu(self.conv1(x))) + torch.relu(self.proj(x))

    with pytest.raises(GraphConversionError, match=r"node 'x' feeds 2 nodes \('conv1', 'proj'\): a branch"):
        module_to_graph(ActivatedShortcut(2, 3, False).eval(), torch.randn(1, 2, 8, 8))


def _permuted_residual(module: Residual, perm: torch.Tensor) -> Residual:
    """``module`` with the neurons of layers 1 and 2 (joined by the skip) permuted alike: the same function."""
    permuted = Residual().double()
    with torch.no_grad():
        permuted.a.weight.copy_(module.a.weight[perm]), permuted.a.bias.copy_(module.a.bias[perm])
        permuted.b.weight.copy_(module.b.weight[perm][:, perm]), permuted.b.bias.copy_(module.b.bias[perm])
        permuted.c.weight.copy_(module.c.weight[:, perm]), permuted.c.bias.copy_(module.c.bias)
    return permuted


@pytest.mark.parametrize("name", ["gmn", "ng_gnn", "nft"])
def test_message_passing_metanets_read_skip_edges_and_respect_the_residual_symmetry(name):
    """Permuting the neurons a skip joins alike preserves the function; the readout (float64) is unchanged."""
    from neuralgraph.nn import InvariantReadout, build_metanet

    torch.manual_seed(0)
    module = Residual().double()
    perm = torch.tensor([2, 0, 1])
    inputs = torch.randn(4, 2, dtype=torch.float64)
    torch.testing.assert_close(_permuted_residual(module, perm)(inputs), module(inputs), rtol=1e-12, atol=1e-12)
    graphs = Batch.from_data_list([module_to_graph(module), module_to_graph(_permuted_residual(module, perm))])
    spec = GraphSpec.of(graphs)
    assert spec.skip_edges
    metanet = build_metanet(name, spec=spec, hidden_dim=8, num_layers=2).double().eval()
    metanet.encoder.set_input_statistics(graphs)  # per-layer weight statistics leave the skip edges out
    into_2 = (graphs.edge_kind == WEIGHT_EDGE) & (graphs.edge_layer == 1)
    torch.testing.assert_close(metanet.encoder.edge_mean[1], graphs.edge_attr[into_2].mean(), rtol=1e-12, atol=0)
    readout = InvariantReadout(8, 3).double().eval()
    out = readout(graphs, *metanet(graphs))
    torch.testing.assert_close(out[0], out[1], rtol=1e-10, atol=1e-10)
    broken = _permuted_residual(module, perm)  # control: layer 2 unpermuted, the skip now joins other neurons
    with torch.no_grad():
        broken.b.weight.copy_(module.b.weight[:, perm]), broken.b.bias.copy_(module.b.bias)
        broken.c.weight.copy_(module.c.weight)
    control = Batch.from_data_list([module_to_graph(module), module_to_graph(broken)])
    out = readout(control, *metanet(control))
    assert not torch.allclose(out[0], out[1], rtol=1e-6, atol=1e-6)
    degrees = {"degree_histogram": list(spec.degree_histogram)} if name == "ng_gnn" else {}
    plain = build_metanet(name, hidden_dim=8, num_layers=2, **degrees).double()
    with pytest.raises(ValueError, match="graph field edge_kind marks residual skip or shortcut edges.*skip_edges=True"):
        plain(graphs)


@pytest.mark.parametrize("name,options", [("dws", {}), ("nfn_hnp", {}), ("gmn", {"probe_features": 4}),
                                          ("scalegmn", {"network_activation": "relu"})])
def test_metanets_that_assume_consecutive_layers_refuse_skip_edges(name, options):
    from neuralgraph.nn import build_metanet

    with pytest.raises(ValueError, match="skip_edges=True with per-layer tables"):
        build_metanet(name, hidden_dim=8, num_layers=1, skip_edges=True, **options)


def test_batch_graphs_gives_plain_graphs_weight_edge_kinds_and_refuses_mixed_activation_fields():
    from neuralgraph.graph import batch_graphs, mlp_to_graph

    torch.manual_seed(0)
    residual = module_to_graph(Residual())
    plain = module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1)))
    assert getattr(plain, "edge_kind", None) is None
    batch = batch_graphs([plain, residual, plain])
    assert getattr(plain, "edge_kind", None) is None  # the caller's graph is left as it was
    assert torch.equal(batch.get_example(0).edge_kind, torch.full((plain.num_edges,), WEIGHT_EDGE))
    assert torch.equal(batch.get_example(1).edge_kind, residual.edge_kind)
    assert [g.num_edges for g in batch.to_data_list()] == [plain.num_edges, residual.num_edges, plain.num_edges]
    weights, biases = [torch.randn(3, 2), torch.randn(1, 3)], [torch.randn(3), torch.randn(1)]
    with pytest.raises(GraphConversionError, match="graph 1 has no activation field while graph 0 has one"):
        batch_graphs([plain, mlp_to_graph(weights, biases)])
    with pytest.raises(GraphConversionError, match="no graphs"):
        batch_graphs([])

"""module_to_graph reads the module's data flow (torch.fx); what it cannot convert is named."""
import pytest
import torch
from torch import nn

from neuralgraph.graph import GraphConversionError, graph_to_mlp, graph_to_module, module_to_graph
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
    (Residual(), r"node 'relu' feeds 2 nodes \('b', 'add'\): a branch or skip connection"),
    (TwoHeads(), r"layer 'body' \(Linear\) feeds 2 nodes \('left', 'right'\)"),
    (Shared(), r"layer 'layer' \(Linear\) is called more than once"),
    (LooseParameter(), r"parameter 'scale' \(LooseParameter\) is read outside a converted layer"),
    (UnusedHead(), r"layer 'head' \(Linear\) is not called as a layer by forward"),
])
def test_what_the_chain_walk_cannot_convert_is_named(module, message):
    with pytest.raises(GraphConversionError, match=message):
        module_to_graph(module)


def test_a_merge_of_two_chain_values_is_named():
    class Merge(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.b(torch.relu(self.a(x))) + x  # x feeds a and add: reported at the fork

    with pytest.raises(GraphConversionError, match=r"node 'x' feeds 2 nodes \('a', 'add'\)"):
        module_to_graph(Merge())


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
    for bn in (m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)):
        for tensor, low in ((bn.running_mean, -1), (bn.running_var, 0.5), (bn.weight.data, -1), (bn.bias.data, -1)):
            tensor.copy_(torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype) * 1.5 + low)
    return net.eval()


def test_batchnorm_folds_into_mixed_kernel_convolutions_and_round_trips():
    from neuralgraph.graph.converters import fold_batchnorm

    torch.manual_seed(0)
    net = _with_running_statistics(_ConvBnNet().double())
    folded = fold_batchnorm(net)
    x = torch.randn(4, 1, 16, 16, dtype=torch.float64)
    graph = module_to_graph(folded, x)
    assert graph.edge_attr.shape[1] == 25  # the 3x3 kernels are zero-padded to the 5x5 ones
    rebuilt = graph_to_module(graph, folded, x)
    torch.testing.assert_close(rebuilt(x), net(x), rtol=1e-10, atol=1e-10)


def test_batchnorm_folding_errors():
    from neuralgraph.graph.converters import fold_batchnorm

    with pytest.raises(GraphConversionError, match="_ConvBnNet is in training mode: .* call .eval"):
        fold_batchnorm(_ConvBnNet())
    with pytest.raises(GraphConversionError, match="layer 'bn3' \\(BatchNorm2d\\) does not directly follow a conv"):
        fold_batchnorm(_with_running_statistics(_ConvBnNet(bn_after_activation=True)))
    net = _ConvBnNet().eval()
    net.bn1 = nn.BatchNorm2d(8, track_running_stats=False)
    with pytest.raises(GraphConversionError, match="layer 'bn1' \\(BatchNorm2d\\) tracks no running statistics"):
        fold_batchnorm(net)

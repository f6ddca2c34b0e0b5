"""Normalisations, attention and transformers as parameter graphs: round trips, refusals and symmetry.

The networks here are written as a user would write them (not imported from the package): a
ViT (patch convolution, positional embedding, pre-norm blocks of ``nn.MultiheadAttention`` and a
GELU MLP, mean pooling), MLPs and CNNs with LayerNorm/RMSNorm/GroupNorm, and a torchvision-style
ResNet with BatchNorm. Symmetry tests permute a module's parameters in a way that leaves its
function unchanged (checked), convert both modules, and require the graphs to be relabellings of
each other and the metanetworks' readouts to agree in float64.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neuralgraph.graph import EDGE_KINDS, GraphConversionError, GraphSpec, graph_to_module, module_to_graph
from neuralgraph.nn import build_metanet


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_dim, batch_first=True, activation=nn.GELU):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=batch_first)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), activation(), nn.Linear(mlp_dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, dim=12, depth=1, heads=3, mlp_dim=16, patch=7, classes=10, batch_first=True, image=14):
        super().__init__()
        self.batch_first = batch_first
        self.patch = nn.Conv2d(1, dim, patch, stride=patch)
        tokens = (image // patch) ** 2
        self.position = nn.Parameter(torch.randn((1, tokens, dim) if batch_first else (tokens, 1, dim)))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_dim, batch_first) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        tokens = self.patch(images).flatten(2)
        x = (tokens.transpose(1, 2) if self.batch_first else tokens.permute(2, 0, 1)) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1 if self.batch_first else 0))


def randomized(module: nn.Module, seed: int = 0) -> nn.Module:
    """float64, eval mode, every parameter (norms' gamma/beta too) random."""
    generator = torch.Generator().manual_seed(seed)
    module = module.double().eval()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(0.5 * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return module


def images(size=14, batch=3, seed=1):
    return torch.randn(batch, 1, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def round_trip(module, template, x):
    graph = module_to_graph(module, example_input=x)
    rebuilt = graph_to_module(graph, template, example_input=x).eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(x), module(x))
    again = module_to_graph(rebuilt, example_input=x)
    assert torch.equal(again.edge_attr, graph.edge_attr) and torch.equal(again.x, graph.x)
    return graph


@settings(max_examples=8, deadline=None)
@given(depth=st.integers(1, 2), heads=st.sampled_from([1, 2, 3, 4]), mlp_dim=st.integers(1, 9),
       batch_first=st.booleans(), seed=st.integers(0, 99))
def test_vit_round_trips_exactly(depth, heads, mlp_dim, batch_first, seed):
    dim = 12
    module = randomized(ViT(dim, depth, heads, mlp_dim, batch_first=batch_first), seed)
    graph = round_trip(module, ViT(dim, depth, heads, mlp_dim, batch_first=batch_first).double(), images())
    tokens = 4
    per_block = 3 * dim + heads + 3 * dim + mlp_dim + dim  # norm, Q, K, V, heads, O, norm, hidden, out
    assert graph.num_nodes == 1 + tokens + dim + depth * per_block + dim + 10
    assert len(graph.layout) == 3 + 9 * depth + 2
    counts = torch.bincount(graph.edge_kind, minlength=len(EDGE_KINDS))
    kind = {name: int(counts[i]) for i, name in enumerate(EDGE_KINDS)}
    assert kind["query"] == kind["key"] == kind["value"] == kind["attention_output"] == depth * dim * dim
    assert kind["pair"] == depth * dim and kind["member"] == 3 * depth * dim
    assert kind["position"] == tokens * dim and kind["layer_norm"] == (2 * depth + 1) * dim
    assert kind["skip"] == 2 * depth * dim


def test_norm_layers_round_trip():
    mlp = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 6), nn.RMSNorm(6), nn.SiLU(),
                        nn.Linear(6, 2))
    x = torch.randn(4, 3, dtype=torch.float64)
    graph = round_trip(randomized(mlp), type(mlp)(*[type(m)(*_args(m)) for m in mlp]).double(), x)
    assert graph.layout == (3, 8, 8, 6, 6, 2)
    cnn = nn.Sequential(nn.Conv2d(2, 8, 3), nn.GroupNorm(4, 8), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 3))
    x = torch.randn(2, 2, 9, 9, dtype=torch.float64)
    graph = round_trip(randomized(cnn), _fresh(cnn), x)
    assert graph.layout == (2, 8, 8, 4, 4, 3)  # conv, its GroupNorm, the 4 group nodes, conv, linear
    group = graph.edge_kind == EDGE_KINDS.index("member")
    assert torch.equal(graph.node_index[graph.edge_index[1, group]], torch.arange(8) // 2)


def _args(module):
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
        return module.normalized_shape
    return ()


def _fresh(module):
    import copy
    fresh = copy.deepcopy(module)
    for sub in fresh.modules():
        if hasattr(sub, "reset_parameters"):
            sub.reset_parameters()
    return fresh


def test_norms_without_parameters_need_their_identity_in_the_graph():
    mlp = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4, elementwise_affine=False), nn.Linear(4, 1)).double()
    graph = module_to_graph(mlp)
    graph.x[7, 0] = 0.5  # a beta (the norm's first node: after 3 inputs and 4 neurons) the template has no parameter for
    with pytest.raises(GraphConversionError, match=r"^layer '1' \(LayerNorm\): the graph's beta \(biases\) are not all 0.0"):
        graph_to_module(graph, mlp)


class Downsample(nn.Module):
    """torchvision's BasicBlock with stride and a 1x1 projection shortcut, written out."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, widths=(4, 8)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(Downsample(widths[0], widths[0], 1))
        self.layer2 = nn.Sequential(Downsample(widths[0], widths[1], 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[1], 5)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def with_statistics(module, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for sub in module.modules():
        if isinstance(sub, nn.BatchNorm2d):
            sub.running_mean.copy_(torch.randn(sub.num_features, generator=generator, dtype=sub.running_mean.dtype))
            sub.running_var.copy_(torch.rand(sub.num_features, generator=generator, dtype=sub.running_var.dtype) + 0.5)
    return module


def test_a_resnet_with_batchnorm_converts_in_eval_mode_without_a_manual_fold():
    resnet = with_statistics(randomized(ResNet()))
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    graph = module_to_graph(resnet, example_input=x)
    assert graph.layout == (3, 4, 4, 4, 8, 8, 5)
    rebuilt = graph_to_module(graph, ResNet().double().eval(), example_input=x)
    assert type(rebuilt) is ResNet and isinstance(rebuilt.bn1, nn.BatchNorm2d)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), resnet(x), rtol=1e-12, atol=1e-12)
    assert torch.equal(module_to_graph(rebuilt, example_input=x).edge_attr, graph.edge_attr)
    with pytest.raises(GraphConversionError, match=r"^ResNet is in training mode: BatchNorm is folded .* call .eval"):
        module_to_graph(resnet.train())


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (1x1, 3x3 with the stride, 1x1 to 4x the width), written out."""

    expansion = 4

    def __init__(self, cin, width, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TorchvisionResNet(nn.Module):
    """torchvision.models.ResNet's structure (stem, four stages, downsample = 1x1 conv + BN), at base width ``width``."""

    def __init__(self, block, layers, width=4, classes=7):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._stage(block, width, layers[0])
        self.layer2 = self._stage(block, 2 * width, layers[1], 2)
        self.layer3 = self._stage(block, 4 * width, layers[2], 2)
        self.layer4 = self._stage(block, 8 * width, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * block.expansion, classes)

    def _stage(self, block, width, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != width * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, width * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(width * block.expansion))
        stage = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = width * block.expansion
        stage += [block(self.inplanes, width) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.mark.parametrize("block, layers, depth", [(BasicBlock, [2, 2, 2, 2], 18), (Bottleneck, [3, 4, 6, 3], 50)])
def test_torchvision_style_resnets_18_and_50_convert_and_round_trip(block, layers, depth):
    resnet = with_statistics(randomized(TorchvisionResNet(block, layers)))
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    graph = module_to_graph(resnet, example_input=x)
    convs = sum(isinstance(m, nn.Conv2d) for m in resnet.modules())
    assert len(graph.layout) == 1 + convs - sum(isinstance(m, nn.Sequential) and len(m) == 2 and
                                                isinstance(m[1], nn.BatchNorm2d) for m in resnet.modules()) + 1
    assert depth == 2 + sum(len(stage) for stage in (resnet.layer1, resnet.layer2, resnet.layer3,
                                                    resnet.layer4)) * (2 if block is BasicBlock else 3)
    rebuilt = graph_to_module(graph, TorchvisionResNet(block, layers).double().eval(), example_input=x)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), resnet(x), rtol=1e-12, atol=1e-12)
    assert torch.equal(module_to_graph(rebuilt, example_input=x).edge_attr, graph.edge_attr)


class ClassToken(ViT):
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, 12))

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2) + self.position
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return self.head(self.blocks[0](x)[:, 0])


class CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.memory = nn.Linear(8, 8)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        h = self.embed(x)
        m = self.memory(h)
        return self.attention(h, m, m)[0]


class Attend(nn.Module):
    def __init__(self, attention, output=0):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.attention = attention
        self.output = output

    def forward(self, x):
        h = self.embed(x)
        return self.attention(h, h, h)[self.output]


class ChannelNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(self.conv(x))


@pytest.mark.parametrize("module, example, message", [
    (ClassToken(), torch.randn(2, 1, 14, 14), r"^parameter 'cls' \(ClassToken\) is read outside a converted layer by "
                                              r"node 'cat'.*a class token is not\)$"),
    (CrossAttention(), torch.randn(2, 3, 4), r"^layer 'attention' \(MultiheadAttention\) combines 'embed', 'memory'"),
    (Attend(nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True)), torch.randn(2, 3, 4),
     r"add_bias_kv or add_zero_attn: the extra key/value tokens are not graph elements$"),
    (Attend(nn.MultiheadAttention(8, 2, batch_first=True), output=1), torch.randn(2, 3, 4),
     r"^layer 'attention' \(MultiheadAttention\) returns a tuple of which only the output \[0\]"),
    (ChannelNorm(), torch.randn(2, 1, 8, 8), r"^layer 'norm' \(LayerNorm\) reads 6 features on the last axis of "
                                            r"layer 'conv' \(Conv2d\) \(2, 4, 6, 6\), whose neurons \(4\) are on axis 1"),
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.LayerNorm([4, 6, 6])), torch.randn(2, 1, 8, 8),
     r"^layer '1' \(LayerNorm\): LayerNorm over \(4, 6, 6\): only a norm over one feature axis"),
])
def test_what_a_graph_cannot_hold_is_refused_in_one_line(module, example, message):
    with pytest.raises(GraphConversionError, match=message) as error:
        module_to_graph(module.eval(), example_input=example)
    assert "\n" not in str(error.value)


# --- symmetry ---------------------------------------------------------------------------------------------


def permuted_vit(module: ViT, seed: int, control: str | None = None) -> tuple[ViT, dict]:
    """A copy of ``module`` with its hidden units permuted as the function allows (``control``: a
    permutation it does not allow), and the permutation of every node layer (as ``node_index`` maps)."""
    import copy
    generator = torch.Generator().manual_seed(seed)
    perm = lambda n: torch.randperm(n, generator=generator)  # noqa: E731
    new = copy.deepcopy(module)
    D = module.head.in_features
    s = perm(D)
    maps = {"stream": s}
    with torch.no_grad():
        new.patch.weight.copy_(module.patch.weight[s]); new.patch.bias.copy_(module.patch.bias[s])
        new.position.copy_(module.position[..., s])
        for norm in [new.norm] + [n for b in new.blocks for n in (b.norm1, b.norm2)]:
            norm.weight.copy_(norm.weight[s]); norm.bias.copy_(norm.bias[s])
        new.head.weight.copy_(module.head.weight[:, s])
        if control == "outputs":
            new.head.weight.copy_(new.head.weight.flip(0)); new.head.bias.copy_(new.head.bias.flip(0))
        for i, (old, block) in enumerate(zip(module.blocks, new.blocks)):
            h = old.attention.num_heads
            dh = D // h
            heads = perm(h)
            qk = torch.stack([perm(dh) for _ in range(h)])
            v = torch.stack([perm(dh) for _ in range(h)])
            q_rows = torch.cat([heads[j] * dh + qk[heads[j]] for j in range(h)])
            v_rows = torch.cat([heads[j] * dh + v[heads[j]] for j in range(h)])
            k_rows = q_rows.clone()
            if control == "query":  # query dimensions of two heads swapped without their keys: not a symmetry
                k_rows = torch.cat([q_rows[dh:2 * dh], q_rows[:dh], q_rows[2 * dh:]]) if h > 1 else q_rows.flip(0)
            rows = torch.cat([q_rows, D + k_rows, 2 * D + v_rows])
            w, b = old.attention.in_proj_weight, old.attention.in_proj_bias
            block.attention.in_proj_weight.copy_(w[rows][:, s]); block.attention.in_proj_bias.copy_(b[rows])
            block.attention.out_proj.weight.copy_(old.attention.out_proj.weight[s][:, v_rows])
            block.attention.out_proj.bias.copy_(old.attention.out_proj.bias[s])
            m = perm(old.mlp[0].out_features)
            block.mlp[0].weight.copy_(old.mlp[0].weight[m][:, s]); block.mlp[0].bias.copy_(old.mlp[0].bias[m])
            block.mlp[2].weight.copy_(old.mlp[2].weight[s][:, m]); block.mlp[2].bias.copy_(old.mlp[2].bias[s])
            maps[i] = {"q": q_rows, "k": k_rows, "v": v_rows, "heads": heads, "mlp": m}
    return new, maps


def node_map(graph, maps, depth) -> torch.Tensor:
    """For each node of the permuted module's graph, the node of the original graph it came from."""
    layers = ["in", "pos", "stream"] + sum([["stream", "q", "k", "v", "heads", "stream", "stream", "mlp", "stream"]
                                            for _ in range(depth)], []) + ["stream", "out"]
    sizes = torch.tensor(graph.layout)
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    source, block = [], -1
    for l, role in enumerate(layers):
        block += role == "q"
        index = torch.arange(graph.layout[l])
        if role == "stream":
            index = maps["stream"]
        elif role in ("q", "k", "v", "heads", "mlp"):
            index = maps[block][role]
        source.append(offsets[l] + index)
    return torch.cat(source)


@pytest.mark.parametrize("name", ["gmn", "ng_gnn", "ng_t", "nft"])
def test_metanets_read_vits_with_exactly_the_attention_symmetry(name):
    depth = 2
    module = randomized(ViT(dim=12, depth=depth, heads=3, mlp_dim=5), seed=3)
    x = images()
    permuted, maps = permuted_vit(module, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(permuted(x), module(x), rtol=1e-12, atol=1e-12)  # a symmetry of the function
    graph, other = module_to_graph(module, example_input=x), module_to_graph(permuted, example_input=x)
    source = node_map(other, maps, depth)
    assert torch.equal(other.x, graph.x[source])
    inverse = torch.empty_like(source)
    inverse[source] = torch.arange(len(source))
    moved = inverse[graph.edge_index]
    key = lambda ei, kind, attr: sorted(zip(ei[0].tolist(), ei[1].tolist(), kind.tolist(), attr[:, 0].tolist()))  # noqa: E731
    assert key(moved, graph.edge_kind, graph.edge_attr) == key(other.edge_index, other.edge_kind, other.edge_attr)

    torch.manual_seed(0)
    spec = GraphSpec.of(graph)
    metanet = build_metanet(name, spec=spec, hidden_dim=16, num_layers=2).double().eval()
    readout = metanet.readout(3).double().eval()

    def run(g):
        node, edge = metanet(g)
        return node, readout(g, node, edge)

    node, out = run(graph)
    node_p, out_p = run(other)
    torch.testing.assert_close(node_p, node[source], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out_p, out, rtol=1e-10, atol=1e-10)
    for control in ("outputs", "query"):
        changed, _ = permuted_vit(module, seed=4, control=control)
        with torch.no_grad():
            assert (changed(x) - module(x)).abs().max() > 1e-3  # not a symmetry of the function
        assert (run(module_to_graph(changed, example_input=x))[1] - out).abs().max() > 1e-6


@pytest.mark.parametrize("name", ["dws", "nfn_np", "nfn_hnp", "scalegmn"])
def test_weight_space_models_refuse_transformer_graphs_in_one_line(name):
    graph = module_to_graph(randomized(ViT()), example_input=images())
    with pytest.raises(ValueError) as error:
        build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=1)
    assert "\n" not in str(error.value)


def test_a_module_converter_reads_modules_of_its_architecture_as_module_to_graph_does():
    from neuralgraph.graph import ModuleConverter

    x = images()
    converter = ModuleConverter(randomized(ViT(depth=2), seed=0), example_input=x)
    resnet_converter = ModuleConverter(with_statistics(randomized(ResNet())), example_input=torch.randn(2, 3, 16, 16,
                                                                                                       dtype=torch.float64))
    for seed in (1, 2):
        vit = randomized(ViT(depth=2), seed=seed)
        expected, graph = module_to_graph(vit, example_input=x), converter(vit)
        for field in ("x", "edge_attr", "edge_index", "edge_kind", "node_type", "activation"):
            assert torch.equal(getattr(graph, field), getattr(expected, field)), field
        assert graph.architecture == expected.architecture
        resnet = with_statistics(randomized(ResNet(), seed), seed)
        assert torch.equal(resnet_converter(resnet).edge_attr, module_to_graph(resnet).edge_attr)
    for other, what in [(randomized(ViT(depth=2, heads=4)), "modules"), (randomized(ViT(depth=1)), "modules"),
                        (randomized(ResNet()), "type")]:
        with pytest.raises(GraphConversionError, match=rf"^\w+: its {what} differ from the template's"):
            converter(other)

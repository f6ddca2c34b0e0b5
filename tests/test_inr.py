"""SIREN convention, rendering, the hand-written gradient, the compiled kernel and the batched fitter."""
import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import neuralgraph._kernels as kernels
from neuralgraph.data.mnist import load_subset
from neuralgraph.inr import (
    DWS_MNIST,
    FitConfig,
    Siren,
    SirenConvention,
    calibrated_backend,
    fit_inrs,
    grid_axes,
    grid_coordinates,
    init_siren,
    pack,
    psnr,
    render,
    unpack,
)
from neuralgraph.inr.backend import compiled_loss_and_gradient
from neuralgraph.inr.gradient import Workspace, loss_and_gradient

SIREN_INIT = SirenConvention(init="siren")
conventions = st.builds(
    SirenConvention,
    layout=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(lambda h: (2, *h, 1)),
    w0=st.sampled_from([1.0, 30.0]),
    output_offset=st.sampled_from([0.0, 0.5]),
    grid=st.sampled_from(["ij", "xy"]),
    init=st.sampled_from(["dws", "siren"]),
)


def digits(n):
    return torch.from_numpy(load_subset("train").images[:n]).float() / 255


def perturbed_inrs(convention, n, dtype=torch.float64, seed=0):
    weights, biases = init_siren(range(n), convention, dtype)
    g = torch.Generator().manual_seed(seed)
    return ([w + 0.05 * torch.randn(w.shape, generator=g, dtype=dtype) for w in weights],
            [b + 0.1 * torch.randn(b.shape, generator=g, dtype=dtype) for b in biases])


def test_convention_round_trips_and_rejects_bad_fields():
    assert SirenConvention.from_dict(SIREN_INIT.to_dict()) == SIREN_INIT
    assert DWS_MNIST.num_parameters == sum(w.numel() + b.numel() for w, b in zip(*init_siren([0])))
    with pytest.raises(ValueError, match="grid"):
        SirenConvention(grid="yx")
    with pytest.raises(ValueError, match="layout"):
        SirenConvention(layout=(3, 8, 1))
    with pytest.raises(ValueError, match="unknown fields"):
        SirenConvention.from_dict({**DWS_MNIST.to_dict(), "omega": 1})


def test_grid_orientation():
    ij = grid_coordinates(3, 4, SirenConvention(grid="ij"))
    xy = grid_coordinates(3, 4, SirenConvention(grid="xy"))
    # pixel (row 0, col 3): top right
    assert ij[3].tolist() == [-1.0, 1.0] and xy[3].tolist() == [1.0, -1.0]
    # swapping the first layer's input columns turns an "ij" INR into the "xy" INR of the same image
    weights, biases = perturbed_inrs(DWS_MNIST, 2)
    swapped = [weights[0].flip(-1), *weights[1:]]
    assert torch.allclose(render(weights, biases, 9, SirenConvention(grid="ij")),
                          render(swapped, biases, 9, SirenConvention(grid="xy")))


@settings(max_examples=20, deadline=None)
@given(conventions, st.integers(1, 3), st.integers(2, 9))
def test_render_matches_plain_module(device, convention, n, resolution):  # hypothesis fills the last three
    weights, biases = perturbed_inrs(convention, n)
    images = render([w.to(device) for w in weights], [b.to(device) for b in biases], resolution, convention).cpu()
    coords = grid_coordinates(resolution, resolution, convention, dtype=torch.float64)
    for i in range(n):
        module = Siren(convention).double().load([w[i] for w in weights], [b[i] for b in biases])
        expected = module(coords).view(resolution, resolution) + convention.output_offset
        assert torch.allclose(images[i], expected, atol=1e-12)
    single = render([w[0] for w in weights], [b[0] for b in biases], resolution, convention)
    assert torch.allclose(single, images[0], atol=1e-12)


def test_render_is_differentiable_and_checks_shapes(device):
    weights, biases = perturbed_inrs(DWS_MNIST, 2)
    weights, biases = [w.to(device).requires_grad_() for w in weights], [b.to(device) for b in biases]
    render(weights, biases, 64).sum().backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in weights)
    with pytest.raises(ValueError, match="layer 2"):
        render([weights[0], weights[1][:, :5], weights[2]], biases)


@settings(max_examples=20, deadline=None)
@given(conventions, st.integers(1, 4), st.integers(2, 7), st.integers(2, 7))
def test_hand_written_gradient_equals_autograd(device, convention, n, height, width):
    weights, biases = perturbed_inrs(convention, n)
    flat = pack(weights, biases)
    targets = torch.rand(n, height, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    space = Workspace(n + 2, convention.layout, height * width, device, torch.float64)
    axes = grid_axes(height, width, device=device, dtype=torch.float64)
    mse, grad = (t.cpu() for t in loss_and_gradient(flat.to(device), targets.to(device), axes, convention, space))
    leaf = flat.clone().requires_grad_()
    reference = (render(*unpack(leaf, convention.layout), (height, width), convention) - targets).square()
    reference = reference.flatten(1).mean(1)
    reference.sum().backward()
    assert torch.allclose(mse, reference, rtol=1e-10, atol=1e-13)
    assert torch.allclose(grad, leaf.grad, rtol=1e-9, atol=1e-12)


OUTPUT_ULPS = 256  # float32 error of a SIREN's output in units of eps (measured: 7 on a 1-pixel loss of 0.006)


def compiled_kernel():
    """The compiled SIREN kernel (built on first use, about 3 s), or a skip saying why it is absent."""
    try:
        return kernels.siren_library()
    except kernels.KernelBuildError as err:
        pytest.skip(f"compiled SIREN kernel unavailable: {err}")


@pytest.mark.cpu_only("the compiled SIREN kernel is CPU code")
@settings(max_examples=25, deadline=None)
@given(conventions.filter(lambda c: len(c.layout) == 4), st.integers(1, 40), st.integers(1, 40),
       st.integers(1, 3), st.integers(1, 30), st.integers(1, 30))
def test_compiled_kernel_matches_float64_reference(convention, d1, d2, n, height, width):
    # widths not multiple of the kernel's 3- and 4-row blocks, images not multiple of its 112-pixel chunks
    compiled_kernel()
    convention = SirenConvention(**{**convention.to_dict(), "layout": (2, d1, d2, 1)})
    weights, biases = perturbed_inrs(convention, n)
    flat = pack(weights, biases)
    targets = torch.rand(n, height, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    space = Workspace(n, convention.layout, height * width, "cpu", torch.float64)
    mse, grad = loss_and_gradient(flat, targets, grid_axes(height, width, dtype=torch.float64), convention, space)
    mse32, grad32 = compiled_loss_and_gradient(flat.float(), targets.float(), grid_axes(height, width), convention)
    # float32 rounding: outputs are off by a few ulps of their O(1) scale (OUTPUT_ULPS bounds it), which moves
    # the loss by 2 |residual| of that: relative to a small loss (one pixel fitted well) that is large
    output_error = OUTPUT_ULPS * torch.finfo(torch.float32).eps
    assert bool(((mse32.double() - mse).abs() <= 2e-5 * mse + 2 * mse.sqrt() * output_error).all())
    # a float32 sine argument w0 z carries an absolute error of about |w0 z| eps, which the gradient's
    # products carry on: its relative error scales with the largest argument (a 1-pixel SIREN of width 1
    # can reach |w0 z| ~ 100)
    argument = sine_argument_scale(weights, biases, convention, height, width)
    bound = GRADIENT_ULPS * torch.finfo(torch.float32).eps * (1 + argument)
    assert ((grad32.double() - grad).abs() <= bound[:, None] * grad.abs().amax(1, keepdim=True)).all()


GRADIENT_ULPS = 64  # gradient error per unit of sine argument, in eps: at most 6.2 measured over 151 random cases


def sine_argument_scale(weights, biases, convention, height, width):
    """Per INR, the largest |w0 (W h + b)| a hidden layer's sine sees over the image (float64 forward)."""
    h = grid_coordinates(height, width, convention, dtype=torch.float64).expand(len(weights[0]), -1, -1)
    largest = torch.zeros(len(weights[0]), dtype=torch.float64)
    for w, b in zip(weights[:-1], biases[:-1]):
        z = convention.w0 * (h @ w.transpose(1, 2) + b[:, None])
        largest = torch.maximum(largest, z.abs().amax((1, 2)))
        h = torch.sin(z)
    return largest


# the kernel's register blocking per instruction set: AVX-512 (16 lanes), AVX2 (8), SSE (4);
# on a CPU without AVX-512 the first two builds are the same code
ISA_VARIANTS = {"native": "", "avx2": "-mno-avx512f", "sse": "-mno-avx"}


@pytest.fixture(params=sorted(ISA_VARIANTS))
def kernel_variant(request, monkeypatch):
    """The compiled kernel built for one instruction set (``$NEURALGRAPH_KERNEL_FLAGS``)."""
    monkeypatch.setenv("NEURALGRAPH_KERNEL_FLAGS", ISA_VARIANTS[request.param])
    return compiled_kernel()


@pytest.mark.cpu_only("the compiled SIREN kernel is CPU code")
@pytest.mark.parametrize("d1, d2, height, width", [(5, 7, 13, 11), (32, 32, 28, 28), (3, 1, 1, 30), (9, 17, 30, 2)])
def test_every_instruction_set_path_matches_float64(kernel_variant, d1, d2, height, width):
    # widths below and between the register blocks (2, 3, 4 rows), images not whole chunks
    convention = SirenConvention(layout=(2, d1, d2, 1), grid="ij", output_offset=0.5)
    weights, biases = perturbed_inrs(convention, 2)
    flat = pack(weights, biases)
    targets = torch.rand(2, height, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    space = Workspace(2, convention.layout, height * width, "cpu", torch.float64)
    mse, grad = loss_and_gradient(flat, targets, grid_axes(height, width, dtype=torch.float64), convention, space)
    mse32, grad32 = compiled_loss_and_gradient(flat.float(), targets.float(), grid_axes(height, width), convention)
    assert torch.allclose(mse32.double(), mse, rtol=2e-5, atol=0)
    assert ((grad32.double() - grad).abs() <= 3e-5 * grad.abs().amax(1, keepdim=True)).all()


@pytest.mark.cpu_only("the compiled SIREN kernel is CPU code")
@pytest.mark.parametrize("scale", [4.0, 1e2, 1e4])
def test_kernel_sincos_is_float32_accurate(kernel_variant, scale):
    # the fitter's angles are w0 (W h + b): |.| < 1e3 in fitted sets; one float32 ulp of 1
    # (1.2e-7) bounds the error of the polynomial (~1 ulp) plus the 3-part range reduction
    x = (torch.rand(100_000, generator=torch.Generator().manual_seed(0)) * 2 - 1) * scale
    sin, cos = torch.empty_like(x), torch.empty_like(x)
    kernel_variant.siren_sincos(len(x), x.data_ptr(), sin.data_ptr(), cos.data_ptr())
    ulp = torch.finfo(torch.float32).eps
    assert (sin.double() - x.double().sin()).abs().max() <= ulp
    assert (cos.double() - x.double().cos()).abs().max() <= ulp


def test_auto_backend_is_measured_once_and_follows_the_measurement(monkeypatch, tmp_path):
    compiled_kernel()
    monkeypatch.setattr(kernels, "_libraries", {})
    monkeypatch.setenv("NEURALGRAPH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("NEURALGRAPH_INR_BACKEND", raising=False)
    timings = []

    def torch_faster(steps, flat, targets):
        timings.append(sorted(steps))
        return {"cpp_us": 2.0, "torch_us": 1.0}

    monkeypatch.setattr("neuralgraph.inr.backend._time_steps", torch_faster)
    images, config = digits(2), FitConfig(steps=3)
    auto = fit_inrs(images, [0, 1], config=config)
    assert timings == [["cpp", "torch"]]
    for backend in ("torch", "cpp"):  # auto took the torch path, bit for bit
        forced = fit_inrs(images, [0, 1], config=config, backend=backend)
        assert torch.equal(auto.weights[1], forced.weights[1]) == (backend == "torch")
    fit_inrs(images, [0, 1], config=config)
    assert len(timings) == 1  # cached beside the kernel
    [cache] = tmp_path.glob("*.calibration.json")
    assert cache.name.startswith(kernels.siren_library_path().stem)
    cache.write_text("{not json")
    with pytest.warns(UserWarning, match=r"calibration.json: unreadable backend calibration"):
        assert calibrated_backend(DWS_MNIST, 28, 28)["choice"] == "torch"
    assert len(timings) == 2 and calibrated_backend(DWS_MNIST, 28, 28)["torch_us"] == 1.0


@pytest.mark.cpu_only("the compiled SIREN kernel is CPU code")
def test_calibration_times_both_backends(monkeypatch, tmp_path):
    compiled_kernel()
    monkeypatch.setenv("NEURALGRAPH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_libraries", {})
    entry = calibrated_backend(SirenConvention(layout=(2, 8, 8, 1)), 9, 9)
    assert entry["choice"] == min(("cpp", "torch"), key=lambda name: entry[f"{name}_us"])
    assert entry["cpp_us"] > 0 and entry["torch_us"] > 0


@pytest.mark.cpu_only("the compiled SIREN kernel is CPU code")
def test_compiled_kernel_follows_the_torch_path():
    compiled_kernel()
    images, config = digits(3), FitConfig(lr=1e-3, target_psnr=100.0)
    for steps in (1, 10, 100):
        fits = [fit_inrs(images, [3, 4, 5], DWS_MNIST, dataclasses.replace(config, steps=steps), backend=backend)
                for backend in ("cpp", "torch")]
        mse = [10 ** (-fit.psnr.double() / 10) for fit in fits]
        assert torch.allclose(mse[0], mse[1], rtol=1e-5, atol=0), steps
        for a, b in zip(fits[0].weights + fits[0].biases, fits[1].weights + fits[1].biases):
            assert torch.allclose(a, b, rtol=0, atol=1e-5 * b.abs().max().item()), steps


def test_backend_choice_and_errors(monkeypatch, tmp_path):
    images = digits(1)
    monkeypatch.setenv("NEURALGRAPH_INR_BACKEND", "fast")
    with pytest.raises(ValueError, match=r"NEURALGRAPH_INR_BACKEND 'fast'"):
        fit_inrs(images, [0], config=FitConfig(steps=1))
    monkeypatch.delenv("NEURALGRAPH_INR_BACKEND")
    with pytest.raises(ValueError, match="float32 SIRENs"):
        fit_inrs(images.double(), [0], config=FitConfig(steps=1), backend="cpp")
    with pytest.raises(ValueError, match=r"layout \(2, 8, 1\)"):
        fit_inrs(images, [0], SirenConvention(layout=(2, 8, 1)), FitConfig(steps=1), backend="cpp")
    # no compiler: "cpp" is an error naming the source, "auto" warns and fits with the torch path
    monkeypatch.setattr(kernels, "_libraries", {})
    monkeypatch.setenv("NEURALGRAPH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-compiler"))
    with pytest.raises(kernels.KernelBuildError, match="siren_step.cpp: compiler"):
        fit_inrs(images, [0], config=FitConfig(steps=1), backend="cpp")
    with pytest.warns(UserWarning, match="pure-torch path"):
        fallback = fit_inrs(images, [0], config=FitConfig(steps=3))
    reference = fit_inrs(images, [0], config=FitConfig(steps=3), backend="torch")
    assert torch.equal(fallback.weights[1], reference.weights[1])
    assert list(tmp_path.iterdir()) == []


def test_init_schemes_and_per_seed_determinism():
    weights, biases = init_siren([5, 6], DWS_MNIST)
    again, _ = init_siren([6], DWS_MNIST)
    assert torch.equal(weights[1][1], again[1][0])
    assert weights[0].abs().max() <= math.sqrt(6 / 2) / 30
    assert weights[1].abs().max() <= math.sqrt(6 / 32) / 30
    assert 0.1 < weights[2].abs().max() <= 1 / math.sqrt(32)  # nn.Linear default for the output layer
    assert biases[0].abs().sum() == 0 and biases[2].abs().sum() > 0
    siren_weights, siren_biases = init_siren([5], SIREN_INIT)
    assert 0.25 < siren_weights[0].abs().max() <= 0.5 and all(b.abs().sum() == 0 for b in siren_biases)


def test_fitter_follows_torch_adam_on_a_module():
    image, steps = digits(1), 25
    result = fit_inrs(image, [7], DWS_MNIST, FitConfig(steps=steps, target_psnr=100.0))
    module = Siren(DWS_MNIST).load(*[[t[0] for t in ts] for ts in init_siren([7])])
    optimizer = torch.optim.Adam(module.parameters(), lr=5e-4)
    coords = grid_coordinates(28, 28)
    for _ in range(steps):
        loss = (module(coords).view(28, 28) + 0.5 - image[0]).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for layer, w, b in zip(module.linears(), result.weights, result.biases):
        assert torch.allclose(layer.weight, w[0], atol=2e-5)
        assert torch.allclose(layer.bias, b[0], atol=2e-5)
    assert result.steps.tolist() == [steps]


@pytest.mark.slow
def test_fitting_reaches_40db_within_budget():
    images = digits(3)
    result = fit_inrs(images, range(3), SIREN_INIT, FitConfig(pool_size=2))
    assert (result.psnr >= 40).all() and (result.steps < 1000).all()
    rendered = psnr(render(result.weights, result.biases, 28, SIREN_INIT), images)
    assert torch.allclose(rendered, result.psnr, atol=0.05)


@pytest.fixture
def two_threads():
    """Two torch threads, so that MKL's multithreaded paths (which differ by batch size) run."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("backend", ["cpp", "torch"])
def test_an_inr_does_not_depend_on_its_batch_mates(two_threads, backend):
    if backend == "cpp":
        compiled_kernel()
    images = digits(7)
    config = dict(steps=30, target_psnr=11.0)
    together = fit_inrs(images, range(7), SIREN_INIT, FitConfig(pool_size=3, **config), backend=backend)
    assert len(set(together.steps.tolist())) > 1  # INRs left the pool at different steps
    alone = fit_inrs(images[[5]], [5], SIREN_INIT, FitConfig(pool_size=1, **config), backend=backend)
    reversed_ = fit_inrs(images.flip(0), range(6, -1, -1), SIREN_INIT, FitConfig(pool_size=7, **config),
                         backend=backend)
    for a, b, c in zip(together.weights + together.biases, alone.weights + alone.biases,
                       reversed_.weights + reversed_.biases):
        assert torch.equal(a[5], b[0])
        assert torch.equal(a, c.flip(0))
    assert torch.equal(together.psnr, reversed_.psnr.flip(0))


# the Adam update is shared: the torch backend repeats the check at 5x the cost
@pytest.mark.parametrize("backend", ["cpp", pytest.param("torch", marks=pytest.mark.slow)])
def test_an_inr_does_not_depend_on_its_row_in_the_pool(backend):
    if backend == "cpp":
        compiled_kernel()
    # 170 steps in pools of 36 and of 16: rows 0-31 of a pool of 36 are the body of torch's vector
    # loops, a pool of 16 is all tail, and at step 168 torch's 0.999 ** step differs between the two
    images = digits(36)
    wide, narrow = (fit_inrs(images, range(36), DWS_MNIST, FitConfig(steps=170, target_psnr=float("inf"),
                                                                     pool_size=pool), backend=backend)
                    for pool in (36, 16))
    for a, b in zip(wide.weights + wide.biases, narrow.weights + narrow.biases):
        assert torch.equal(a, b)


def test_fit_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\[N, H, W\]"):
        fit_inrs(torch.rand(28, 28), [0])
    with pytest.raises(ValueError, match="seeds"):
        fit_inrs(torch.rand(2, 28, 28), [0])


@pytest.mark.slow  # two spawned processes import torch: about 30 s on a loaded 2-core machine
def test_make_inrs_in_worker_processes_writes_the_same_bytes(tmp_path):
    from neuralgraph.data import GenerationSettings, make_inrs

    settings = GenerationSettings(fit=FitConfig(steps=6), source="embedded", shard_size=3)
    for workers in (1, 2):
        make_inrs(tmp_path / str(workers), ("train",), limit=5, settings=settings, progress=False, workers=workers)
    files = sorted(p.name for p in (tmp_path / "1").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "2").iterdir()) and "train-00001.safetensors" in files
    for name in files:
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    with pytest.raises(ValueError, match="workers must be >= 1"):
        make_inrs(tmp_path / "0", ("train",), limit=5, settings=settings, progress=False, workers=0)

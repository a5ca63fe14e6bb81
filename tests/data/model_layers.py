"""Deconvolution layers of real MXNet-era models, shared by the fixture generator
``scripts/fixtures/make_layer_fixtures.py`` (run with PyTorch, and re-run under MXNet
1.9.1's own interpreter with NumPy 1.23.5) and ``tests/package/test_model_layers.py``.

Channel counts, kernels, strides, pads, groups and dilations are the models'
own; spatial sizes are cut down (where the real one is larger) so that the
suite stays fast.  Every layer has a non-zero bias.

Inputs are never stored: :func:`make_inputs` regenerates them from the layer's
seed with NumPy's legacy ``RandomState``, whose stream is the same in NumPy
1.23 (MXNet's venv) and 2.x; :func:`checksum` fingerprints them so that a
drift of the generator is caught (the fixture stores the checksums).

This module uses nothing beyond NumPy (it runs under MXNet's old NumPy too).
"""
import hashlib
import math

import numpy as np

#: How many element positions of a large result the fixture keeps.
SAMPLE_SIZE = 2048
#: The axis whose per-channel sums the fixture keeps, per result.
CHANNEL_AXIS = {"out": 1, "data_grad": 1, "weight_grad": 0, "bias_grad": 0}
RESULTS = ("out", "data_grad", "weight_grad", "bias_grad")
INPUTS = ("data", "weight", "bias", "out_grad")


def _layer(name, model, seed, batch, in_channels, spatial, **params):
    params.setdefault("num_group", 1)
    params["no_bias"] = False
    return dict(name=name, model=model, seed=seed, batch=batch, in_channels=in_channels,
                spatial=tuple(spatial), params=params)


# Each entry: name, the model it comes from (with the real input size where it was
# cut down), seed, batch, C_in, input spatial size, and MXNet's Deconvolution kwargs.
#
# Whether MXNet 1.9.1 computes a layer correctly is decided by the generator,
# which checks each of MXNet's paths against PyTorch and records what happened in
# the fixture's per-layer "mxnet" entry.  What it found:
# * MXNet's default MKL-DNN path agrees with PyTorch on every 2-D layer without
#   target_shape and on every 3-D layer: those MXNet values come from it.
# * The MKL-DNN path raises "could not create a descriptor for a dilated
#   deconvolution forward propagation primitive" on the target_shape layers and
#   on every 1-D layer; for those the native path (MXNET_MKLDNN_ENABLED=0)
#   agrees with PyTorch and is recorded instead.
# * The native path gets dilated_d2_s2 (dilation with stride 2) wrong, output
#   off by up to ~5, and has no 3-D implementation (it raises); neither matters
#   since the MKL-DNN path computes those layers.
LAYERS = [
    # DCGAN generator (Radford et al.; MXNet's example/gluon/dc_gan), nz=100, ngf=64.
    _layer("dcgan_g1_project", "DCGAN generator: z 100 -> 512, 1x1 -> 4x4", 7001,
           4, 100, (1, 1), kernel=(4, 4), stride=(1, 1), pad=(0, 0), num_filter=512),
    _layer("dcgan_g2", "DCGAN generator: 512 -> 256, 4x4 -> 8x8", 7002,
           4, 512, (4, 4), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256),
    _layer("dcgan_g3", "DCGAN generator: 256 -> 128, 8x8 -> 16x16", 7003,
           4, 256, (8, 8), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128),
    _layer("dcgan_g4", "DCGAN generator: 128 -> 64, 16x16 -> 32x32", 7004,
           2, 128, (16, 16), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64),
    _layer("dcgan_g5_rgb", "DCGAN generator: 64 -> 3 (RGB), 32x32 -> 64x64", 7005,
           2, 64, (32, 32), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3),
    # U-Net (Ronneberger et al.) 2x2 up-convolutions.
    _layer("unet_up1", "U-Net up-conv 1024 -> 512 k2 s2, 28x28 -> 56x56", 7006,
           1, 1024, (28, 28), kernel=(2, 2), stride=(2, 2), num_filter=512),
    _layer("unet_up4", "U-Net up-conv 128 -> 64 k2 s2 (real input 196x196)", 7007,
           1, 128, (64, 64), kernel=(2, 2), stride=(2, 2), num_filter=64),
    # FCN (Long et al.; MXNet's example/fcn-xs), 21 PASCAL VOC classes.
    _layer("fcn32s_upscore", "FCN-32s score upsampling 21 -> 21 k64 s32 p16, "
           "7x7 -> 224x224", 7008,
           1, 21, (7, 7), kernel=(64, 64), stride=(32, 32), pad=(16, 16), num_filter=21),
    _layer("fcn8s_upscore8", "FCN-8s final upsampling 21 -> 21 k16 s8 p4, "
           "28x28 -> 224x224", 7009,
           1, 21, (28, 28), kernel=(16, 16), stride=(8, 8), pad=(4, 4), num_filter=21),
    _layer("fcn_upscore2", "FCN-16s/8s upscore2 21 -> 21 k4 s2, 7x7 -> 16x16", 7010,
           1, 21, (7, 7), kernel=(4, 4), stride=(2, 2), num_filter=21),
    # Bilinear upsampling as a depthwise deconvolution (MXNet's UpSampling
    # sample_type='bilinear' is exactly this: num_group = channels).
    _layer("bilinear_up_dw64", "bilinear 2x upsampling, depthwise, 64 channels", 7011,
           2, 64, (32, 32), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64,
           num_group=64),
    _layer("bilinear_up_dw256", "bilinear 2x upsampling, depthwise, 256 channels", 7012,
           1, 256, (8, 8), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256,
           num_group=256),
    # Grouped (ResNeXt-style cardinality 32) decoder up-convolutions.
    _layer("resnext_grouped_g32", "ResNeXt-style grouped decoder 512 -> 256, 32 groups, "
           "k3 s2 p1 adj1", 7013,
           2, 512, (8, 8), kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
           num_filter=256, num_group=32),
    _layer("resnext_grouped_g32_k4", "ResNeXt-style grouped up-conv 1024 -> 512, 32 groups, "
           "k4 s2 p1", 7014,
           1, 1024, (4, 4), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=512,
           num_group=32),
    # Dilated (atrous) deconvolutions.
    _layer("dilated_d2", "dilated decoder 256 -> 128 k3 dilate 2 pad 2 (stride 1)", 7015,
           2, 256, (8, 8), kernel=(3, 3), stride=(1, 1), dilate=(2, 2), pad=(2, 2),
           num_filter=128),
    _layer("dilated_d2_s2", "dilated up-conv 128 -> 64 k3 s2 dilate 2 pad 2 adj 1", 7016,
           1, 128, (8, 8), kernel=(3, 3), stride=(2, 2), dilate=(2, 2), pad=(2, 2),
           adj=(1, 1), num_filter=64),
    # Super-resolution: FSRCNN (Dong et al.), x3, d=56.
    _layer("fsrcnn_x3", "FSRCNN x3 last layer 56 -> 1 k9 s3 p4 adj 2", 7017,
           2, 56, (12, 12), kernel=(9, 9), stride=(3, 3), pad=(4, 4), adj=(2, 2),
           num_filter=1),
    # Pose / keypoint heads.
    _layer("simple_baselines_res152", "Simple Baselines (ResNet-152) pose head "
           "2048 -> 256 k4 s2 p1, 8x6 (256x192 input)", 7018,
           1, 2048, (8, 6), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256),
    _layer("centernet_res18", "CenterNet / Simple Baselines (ResNet-18) head "
           "512 -> 256 k4 s2 p1, 16x16 (512x512 input)", 7019,
           2, 512, (16, 16), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256),
    # Instance segmentation: Mask R-CNN mask head, 14x14 RoI features.
    _layer("maskrcnn_mask_head", "Mask R-CNN mask head 256 -> 256 k2 s2, 14x14 RoIs", 7020,
           4, 256, (14, 14), kernel=(2, 2), stride=(2, 2), num_filter=256),
    # target_shape: pad and adj inferred by MXNet.
    _layer("target_2x", "2x up-conv 512 -> 256 k4 s2, target_shape = 2x input", 7021,
           2, 512, (4, 4), kernel=(4, 4), stride=(2, 2), target_shape=(8, 8),
           num_filter=256),
    _layer("dssd300_target_odd", "DSSD300 deconvolution module 512 -> 512 k4 s2, "
           "10x10 -> 19x19 by target_shape (odd: adj 1)", 7022,
           1, 512, (10, 10), kernel=(4, 4), stride=(2, 2), target_shape=(19, 19),
           num_filter=512),
    _layer("target_1d_4x", "1-D 4x upsampler 256 -> 128 k8 s4, target_shape = 4x input",
           7023,
           2, 256, (16,), kernel=(8,), stride=(4,), target_shape=(64,), num_filter=128),
    # 1-D audio generators.
    _layer("wavegan_g1", "WaveGAN generator 1024 -> 512 k25 s4 p11 adj 1, 16 -> 64", 7024,
           1, 1024, (16,), kernel=(25,), stride=(4,), pad=(11,), adj=(1,),
           num_filter=512),
    _layer("melgan_up8", "MelGAN generator 512 -> 256 k16 s8 p4 (real: mel frames)", 7025,
           2, 512, (16,), kernel=(16,), stride=(8,), pad=(4,), num_filter=256),
    # 3-D U-Net (Cicek et al.) / V-Net (Milletari et al.).
    _layer("unet3d_up_256", "3-D U-Net / V-Net up-conv 256 -> 128 k2 s2", 7026,
           1, 256, (4, 4, 4), kernel=(2, 2, 2), stride=(2, 2, 2), num_filter=128),
    _layer("unet3d_up_128", "3-D U-Net / V-Net up-conv 128 -> 64 k2 s2", 7027,
           1, 128, (16, 16, 16), kernel=(2, 2, 2), stride=(2, 2, 2), num_filter=64),
    _layer("vnet3d_k4", "3-D up-conv 128 -> 64 k4 s2 p1", 7028,
           1, 128, (4, 4, 4), kernel=(4, 4, 4), stride=(2, 2, 2), pad=(1, 1, 1),
           num_filter=64),
]
LAYERS_BY_NAME = {layer["name"]: layer for layer in LAYERS}


def _per_dim(params, key, default):
    value = params.get(key)
    return tuple(value) if value else (default,) * len(params["kernel"])


def geometry(layer):
    """Per spatial dim: stride, dilate, effective pad, effective adj, output size.

    With a ``target_shape``, pad and adj come from MXNet's InferPad: per dim
    ``total = stride*(in-1) + dilate*(k-1) + 1 - target``, ``adj = total % 2``,
    ``pad = (total + 1) // 2``.  The output size is then
    ``stride*(in-1) + dilate*(k-1) + 1 - 2*pad + adj``.  These (pad, adj) are
    exactly PyTorch's (padding, output_padding).
    """
    params = layer["params"]
    kernel = tuple(params["kernel"])
    stride = _per_dim(params, "stride", 1)
    dilate = _per_dim(params, "dilate", 1)
    target = params.get("target_shape")
    if target and any(target):
        total = [s * (i - 1) + d * (k - 1) + 1 - t for i, k, s, d, t in
                 zip(layer["spatial"], kernel, stride, dilate, target)]
        adj = tuple(t % 2 for t in total)
        pad = tuple((t + 1) // 2 for t in total)
    else:
        pad = _per_dim(params, "pad", 0)
        adj = _per_dim(params, "adj", 0)
    out = tuple(s * (i - 1) + d * (k - 1) + 1 - 2 * p + a for i, k, s, d, p, a in
                zip(layer["spatial"], kernel, stride, dilate, pad, adj))
    return dict(kernel=kernel, stride=stride, dilate=dilate, pad=pad, adj=adj, out=out)


def shapes(layer):
    """Shapes of data, weight, bias, out (= out_grad) under MXNet's conventions."""
    params, geo = layer["params"], geometry(layer)
    groups, num_filter = params["num_group"], params["num_filter"]
    return dict(
        data=(layer["batch"], layer["in_channels"]) + layer["spatial"],
        weight=(layer["in_channels"], num_filter // groups) + geo["kernel"],
        bias=(num_filter,),
        out=(layer["batch"], num_filter) + geo["out"])


def mxnet_kwargs(layer):
    """The layer's Deconvolution keyword arguments, tuples as MXNet takes them."""
    return {k: tuple(v) if isinstance(v, (list, tuple)) else v
            for k, v in layer["params"].items()}


def make_inputs(layer):
    """float32 data, weight, bias, out_grad from ``RandomState(seed)``, in that order.

    data, bias and out_grad are standard normal; the weight is standard normal
    scaled by ``1/sqrt(C_in/num_group * prod(kernel) / prod(stride))`` (about the
    number of products summed into one output), so outputs are O(1).
    """
    shp = shapes(layer)
    params, geo = layer["params"], geometry(layer)
    rng = np.random.RandomState(layer["seed"])
    fan_in = (layer["in_channels"] // params["num_group"] * math.prod(geo["kernel"])
              / math.prod(geo["stride"]))
    data = rng.standard_normal(shp["data"]).astype(np.float32)
    weight = (rng.standard_normal(shp["weight"]) / math.sqrt(fan_in)).astype(np.float32)
    bias = rng.standard_normal(shp["bias"]).astype(np.float32)
    out_grad = rng.standard_normal(shp["out"]).astype(np.float32)
    return dict(data=data, weight=weight, bias=bias, out_grad=out_grad)


def checksum(array):
    """SHA-256 of the array's little-endian float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f4").tobytes()).hexdigest()


def sample_indices(layer, result, size):
    """Sorted flat positions (at most SAMPLE_SIZE) of ``result`` kept in the fixture,
    drawn from the layer's seed; None when the whole result is kept."""
    if size <= SAMPLE_SIZE:
        return None
    rng = np.random.RandomState([layer["seed"], 1 + RESULTS.index(result)])
    return np.sort(rng.choice(size, SAMPLE_SIZE, replace=False)).astype(np.int64)


def channel_sums(array, result):
    """float64 sums of ``array`` over every axis but ``CHANNEL_AXIS[result]``."""
    array = np.asarray(array, dtype=np.float64)
    axis = CHANNEL_AXIS[result]
    return array.sum(axis=tuple(a for a in range(array.ndim) if a != axis))

"""Layers the GEMM plans of mxdeconv's own (``onednn/_gemm.pxi``) are tested
on: realistic channel counts, 1-D to 3-D, strided, dilated, padded, cropped by
``adj`` or ``target_shape``, grouped and depthwise, batch > 1."""
import numpy as np

from mxdeconv.semantics.attributes import infer_geometry, parse_params

LAYERS = {
    # name: (data shape, parameters)
    "dcgan_512_256": ((3, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                           num_filter=256)),
    "dilated_adj": ((2, 64, 9, 7), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
                                        pad=(2, 2), adj=(1, 1), num_filter=64)),
    "target_shape": ((2, 128, 6, 5), dict(kernel=(3, 3), stride=(2, 2),
                                          target_shape=(12, 10), num_filter=64)),
    "grouped": ((2, 64, 5, 7), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 0),
                                    num_filter=96, num_group=4)),
    "depthwise_upsample": ((2, 64, 8, 8), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                               num_filter=64, num_group=64)),
    "audio_1d": ((3, 128, 33), dict(kernel=(16,), stride=(8,), pad=(4,), num_filter=64)),
    "volume_3d": ((2, 32, 3, 4, 5), dict(kernel=(2, 3, 3), stride=(1, 2, 2), dilate=(1, 2, 1),
                                         pad=(0, 1, 1), num_filter=16)),
    "pad_beyond_kernel": ((2, 8, 4, 4), dict(kernel=(3, 3), stride=(3, 3), pad=(4, 4),
                                             num_filter=8)),
}


def gemm_layer(name, with_bias=True):
    """(geometry, data, out_grad) of layer ``name``, float32, seeded by its name."""
    shape, params = LAYERS[name]
    geom = infer_geometry(parse_params(dict(params, no_bias=not with_bias)), shape)
    rng = np.random.default_rng(len(name))
    data = rng.standard_normal(geom.data_shape).astype(np.float32)
    out_grad = rng.standard_normal(geom.out_shape).astype(np.float32)
    return geom, data, out_grad

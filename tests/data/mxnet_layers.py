"""The Gluon layers of the MXNet cross-check, shared by the fixture generator
(run under MXNet 1.9.1) and tests/gluon/test_gluon.py (run without MXNet).

Each entry: the Gluon class name, its constructor arguments and the input
shape.  The bias is initialised non-zero (Uniform(0.5)) so that it is checked.
"""

LAYERS = {
    "conv1d": ("Conv1DTranspose",
               dict(channels=3, kernel_size=4, strides=2, padding=1, dilation=2,
                    in_channels=2),
               (1, 2, 7)),
    "conv2d": ("Conv2DTranspose",
               dict(channels=4, kernel_size=3, strides=2, padding=1, output_padding=1,
                    groups=2, in_channels=6),
               (1, 6, 5, 5)),
    "conv3d": ("Conv3DTranspose",
               dict(channels=2, kernel_size=2, strides=2, padding=0, use_bias=False,
                    in_channels=2),
               (1, 2, 2, 3, 3)),
}

# A layer initialised with MXNet's defaults (net.initialize(), no initializer
# given): its weight and bias show MXNet's default initialisation.
DEFAULT_LAYER = ("Conv2DTranspose", dict(channels=4, kernel_size=3, in_channels=8))

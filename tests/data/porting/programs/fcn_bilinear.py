# An FCN-style upsampler (the "Fully Convolutional Networks" chapter of d2l.ai's
# MXNet edition): a depthwise Conv2DTranspose initialised with a bilinear kernel
# through init.Constant(ndarray), frozen (lr_mult 0) while a 1x1 score layer
# before it trains with SGD on a softmax cross-entropy.
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
# --- end of imports ---
import numpy as np

num_classes = 5
STEPS = 4


def bilinear_kernel(in_channels, out_channels, kernel_size):
    factor = (kernel_size + 1) // 2
    if kernel_size % 2 == 1:
        center = factor - 1
    else:
        center = factor - 0.5
    og = (np.arange(kernel_size).reshape(-1, 1), np.arange(kernel_size).reshape(1, -1))
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    weight = np.zeros((in_channels, out_channels, kernel_size, kernel_size))
    weight[range(in_channels), range(out_channels), :, :] = filt
    return nd.array(weight)


def data():
    rng = np.random.RandomState(2)
    return {"x": rng.normal(0, 1, (2, 6, 4, 4)).astype(np.float32),
            "label": rng.randint(0, num_classes, (2, 32, 32)).astype(np.float32)}


def build():
    net = nn.HybridSequential()
    with net.name_scope():
        # stands in for the 1x1 conv: a 1x1 transposed convolution is one too
        net.add(nn.Conv2DTranspose(num_classes, kernel_size=1, in_channels=6))
        net.add(nn.Conv2DTranspose(num_classes, kernel_size=16, padding=4, strides=8,
                                   in_channels=num_classes, use_bias=False))
    net[0].initialize(init=init.Xavier())
    net[1].initialize(init.Constant(bilinear_kernel(num_classes, num_classes, 16)))
    net[1].collect_params().setattr('lr_mult', 0)
    net.hybridize()
    return net


def train(net, d, workdir):
    loss = gluon.loss.SoftmaxCrossEntropyLoss(axis=1)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.5, 'wd': 1e-3})
    x, y = nd.array(d["x"]), nd.array(d["label"])
    losses = []
    for _ in range(STEPS):
        with autograd.record():
            l = loss(net(x), y)
        l.backward()
        trainer.step(x.shape[0])
        losses.append(l.mean().asscalar())
    out = net(x)
    pred = out.argmax(axis=1)
    return {"losses": np.array(losses), "output": out.asnumpy(),
            "kernel": net[1].weight.data().asnumpy(), "pred": pred.asnumpy()}

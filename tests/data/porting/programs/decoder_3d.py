# A 3-D decoder (V-Net style) written as a custom HybridBlock: grouped
# Conv3DTranspose, BatchNorm and relu, a skip connection concatenated on the
# channels, trained with RMSProp on an L2 loss.
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
# --- end of imports ---
import numpy as np

STEPS = 4
INPUTS = ("x", "skip")  # what the network is called on


class UpBlock(nn.HybridBlock):
    def __init__(self, channels, in_channels, **kwargs):
        super(UpBlock, self).__init__(**kwargs)
        with self.name_scope():
            self.up = nn.Conv3DTranspose(channels, kernel_size=2, strides=2, groups=2,
                                         in_channels=in_channels, use_bias=False)
            self.bn = nn.BatchNorm(in_channels=channels)
            self.act = nn.Activation('relu')

    def hybrid_forward(self, F, x, skip):
        y = self.act(self.bn(self.up(x)))
        return F.concat(y, skip, dim=1)


class Decoder(nn.HybridBlock):
    def __init__(self, **kwargs):
        super(Decoder, self).__init__(**kwargs)
        with self.name_scope():
            self.block = UpBlock(4, 8)
            self.head = nn.Conv3DTranspose(1, kernel_size=3, padding=1, in_channels=6)

    def hybrid_forward(self, F, x, skip):
        return F.sigmoid(self.head(self.block(x, skip)))


def data():
    rng = np.random.RandomState(4)
    return {"x": rng.normal(0, 1, (2, 8, 2, 3, 3)).astype(np.float32),
            "skip": rng.normal(0, 1, (2, 2, 4, 6, 6)).astype(np.float32),
            "target": rng.uniform(0, 1, (2, 1, 4, 6, 6)).astype(np.float32)}


def build():
    net = Decoder()
    net.initialize(init.MSRAPrelu())
    net.hybridize()
    return net


def train(net, d, workdir):
    x, skip, target = nd.array(d["x"]), nd.array(d["skip"]), nd.array(d["target"])
    trainer = gluon.Trainer(net.collect_params(), 'rmsprop', {'learning_rate': 0.01})
    l2 = gluon.loss.L2Loss()
    losses = []
    for _ in range(STEPS):
        with autograd.record():
            loss = l2(net(x, skip), target)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(loss.mean().asscalar())
    return {"losses": np.array(losses), "output": net(x, skip).asnumpy()}

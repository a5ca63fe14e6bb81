# A 1-D audio upsampler (MelGAN/WaveGAN style): Conv1DTranspose stacks with
# LeakyReLU, Xavier(magnitude=2) initialisation, SGD with momentum and a
# FactorScheduler, an L1 loss toward a sine wave.
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
# --- end of imports ---
import numpy as np

STEPS = 6


def data():
    rng = np.random.RandomState(3)
    return {"x": rng.normal(0, 1, (3, 8, 16)).astype(np.float32)}


def build():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv1DTranspose(16, 8, strides=4, padding=2, in_channels=8),
                nn.LeakyReLU(0.2),
                nn.Conv1DTranspose(8, 4, strides=2, padding=1, in_channels=16),
                nn.LeakyReLU(0.2),
                nn.Conv1DTranspose(1, 7, padding=3, in_channels=8),
                nn.Activation('tanh'))
    net.initialize(mx.init.Xavier(magnitude=2))
    return net


def train(net, d, workdir):
    x = nd.array(d["x"])
    t = nd.arange(128).reshape((1, 1, 128)) * 0.2
    target = nd.sin(t) * 0.5 + nd.cos(t * 0.5) * 0.2
    target = nd.tile(target, (3, 1, 1))
    schedule = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': 0.1, 'momentum': 0.9, 'lr_scheduler': schedule})
    l1 = gluon.loss.L1Loss()
    losses, rates = [], []
    for _ in range(STEPS):
        with autograd.record():
            loss = l1(net(x), target)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(loss.mean().asscalar())
        rates.append(trainer.learning_rate)
    return {"losses": np.array(losses), "rates": np.array(rates),
            "output": net(x).asnumpy()}

# Save a checkpoint mid-training and resume from it: save_parameters and
# collect_params().save after 3 Adam steps, a fresh network loads them
# (load_parameters; collect_params().load for a second copy), a fresh Trainer
# continues for 3 more steps.
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
# --- end of imports ---
import os

import numpy as np


def data():
    rng = np.random.RandomState(5)
    return {"x": rng.normal(0, 1, (4, 4, 2, 2)).astype(np.float32),
            "target": rng.uniform(-1, 1, (4, 2, 8, 8)).astype(np.float32)}


def build(prefix=None):
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Conv2DTranspose(8, 4, strides=2, padding=1, in_channels=4, use_bias=False),
                nn.BatchNorm(in_channels=8),
                nn.LeakyReLU(0.1),
                nn.Conv2DTranspose(2, 4, strides=2, padding=1, in_channels=8,
                                   activation='tanh'))
    net.initialize(init.Xavier(rnd_type='gaussian', factor_type='in', magnitude=2))
    return net


def steps(net, x, target, count):
    trainer = gluon.Trainer(net.collect_params(), 'adam', {'learning_rate': 0.02})
    loss_fn = gluon.loss.L2Loss()
    losses = []
    for _ in range(count):
        with autograd.record():
            loss = loss_fn(net(x), target)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(loss.mean().asscalar())
    return losses


def train(net, d, workdir):
    x, target = nd.array(d["x"]), nd.array(d["target"])
    losses = steps(net, x, target, 3)
    net.save_parameters(os.path.join(workdir, 'epoch3.params'))
    net.collect_params().save(os.path.join(workdir, 'epoch3-all.params'),
                              strip_prefix=net.prefix)
    resumed = build()
    resumed.load_parameters(os.path.join(workdir, 'epoch3.params'))
    copy = build(prefix='copy_')
    copy.collect_params().load(os.path.join(workdir, 'epoch3-all.params'),
                               restore_prefix='copy_')
    same = nd.abs(copy(x) - resumed(x)).max().asscalar()
    losses += steps(resumed, x, target, 3)
    return {"losses": np.array(losses), "output": resumed(x).asnumpy(),
            "copy_diff": np.array(same)}

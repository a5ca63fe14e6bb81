# MXNet 1.9.1's DCGAN example generator (example/gluon/dc_gan/dcgan.py), scaled
# down: Conv2DTranspose + BatchNorm + Activation blocks, Normal(0.02)
# initialisation, Adam with beta1=0.5; trained here on an L2 loss toward fixed
# images (no discriminator: no Conv2D in mxdeconv) for a few steps.
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
# --- end of imports ---
import numpy as np

nz, ngf, nc = 16, 8, 3
STEPS = 5


def data():
    rng = np.random.RandomState(1)
    return {"x": rng.normal(0, 1, (4, nz, 1, 1)).astype(np.float32),
            "target": np.tanh(rng.normal(0, 1, (4, nc, 32, 32))).astype(np.float32)}


def build():
    netG = nn.Sequential()
    with netG.name_scope():
        # input is Z, going into a convolution
        netG.add(nn.Conv2DTranspose(ngf * 4, 4, 1, 0, use_bias=False))
        netG.add(nn.BatchNorm())
        netG.add(nn.Activation('relu'))
        # state size. (ngf*4) x 4 x 4
        netG.add(nn.Conv2DTranspose(ngf * 2, 4, 2, 1, use_bias=False))
        netG.add(nn.BatchNorm())
        netG.add(nn.Activation('relu'))
        # state size. (ngf*2) x 8 x 8
        netG.add(nn.Conv2DTranspose(ngf, 4, 2, 1, use_bias=False))
        netG.add(nn.BatchNorm())
        netG.add(nn.Activation('relu'))
        # state size. (ngf) x 16 x 16
        netG.add(nn.Conv2DTranspose(nc, 4, 2, 1, use_bias=False))
        netG.add(nn.Activation('tanh'))
        # state size. (nc) x 32 x 32
    netG.initialize(mx.init.Normal(0.02), ctx=mx.cpu())
    return netG


def train(netG, d, workdir):
    ctx = mx.context.cpu()
    trainerG = gluon.Trainer(netG.collect_params(), 'adam',
                             {'learning_rate': 0.01, 'beta1': 0.5})
    loss = gluon.loss.L2Loss()
    noise = nd.array(d["x"], ctx=ctx)
    real = nd.array(d["target"], ctx=ctx)
    losses = []
    for _ in range(STEPS):
        with autograd.record():
            fake = netG(noise)
            errG = loss(fake, real)
        errG.backward()
        trainerG.step(noise.shape[0])
        losses.append(nd.mean(errG).asscalar())
    fake = netG(noise)  # inference: BatchNorm's running statistics
    return {"losses": np.array(losses), "output": fake.asnumpy(),
            "running_var": netG[1].running_var.data().asnumpy()}

# An MXNet 1.9.1 Gluon training loop: a small Conv2DTranspose generator trained
# with gluon.Trainer (Adam, a FactorScheduler, weight decay) on gluon.loss.L2Loss.
# scripts/fixtures/make_mxnet_trainer_fixtures.py runs this text under MXNet and records
# the losses; tests/package/test_porting.py runs it under mxdeconv with the
# import lines below replaced, and nothing else changed (docs/porting.rst).
# --- imports: the only lines a port changes ---
import mxnet as mx
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn
# --- end of imports ---


def build_generator():
    """nz=8 -> 16 -> 8 -> 3 channels, 1x1 -> 4x4 -> 8x8 -> 16x16."""
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2DTranspose(16, 4, strides=1, padding=0, in_channels=8,
                                   activation="relu"),
                nn.Conv2DTranspose(8, 4, strides=2, padding=1, in_channels=16,
                                   activation="relu"),
                nn.Conv2DTranspose(3, 4, strides=2, padding=1, in_channels=8,
                                   activation="tanh"))
    return net


def train(net, z, target, steps):
    """``steps`` Adam steps on the L2 loss of ``net(z)`` against ``target``;
    returns each step's mean loss (before that step's update)."""
    schedule = mx.lr_scheduler.FactorScheduler(step=10, factor=0.5, base_lr=0.02)
    trainer = gluon.Trainer(net.collect_params(), "adam",
                            {"learning_rate": 0.02, "lr_scheduler": schedule, "wd": 1e-4})
    l2_loss = gluon.loss.L2Loss()
    z, target = nd.array(z), nd.array(target)
    losses = []
    for _ in range(steps):
        with autograd.record():
            fake = net(z)
            loss = l2_loss(fake, target)
        loss.backward()
        trainer.step(z.shape[0])
        losses.append(loss.mean().asscalar())
    return losses

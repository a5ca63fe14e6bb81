"""The Trainer and loss cases that ``scripts/fixtures/make_mxnet_trainer_fixtures.py`` runs
under MXNet 1.9.1 and ``tests/gluon/test_trainer.py`` / ``tests/gluon/test_loss.py``
run under mxdeconv: the same code, handed either framework's modules
(``autograd``, ``gluon``, ``nd``, ``lr_scheduler``), so that the two cannot drift
apart.  Written for both: only what MXNet 1.9.1 and mxdeconv share.
"""
import numpy as np

SEED = 20261205
STEPS = 6
BATCH = 5

#: The parameters of the optimizer cases: ``w``, ``b`` and ``c`` learn, ``f`` is
#: frozen (``grad_req="null"``: the Trainer skips it).
SHAPES = {"w": (3, 4), "b": (4,), "c": (3, 1), "f": (4,)}
X_SHAPE = (BATCH, 3, 4)

#: name -> the Trainer's optimizer and optimizer_params, and what else the loop does:
#: ``mults``: a parameter's (lr_mult, wd_mult); ``scheduler``: an lr_scheduler class
#: and its arguments; ``stale``: ``c`` is used on even steps only and the steps
#: ignore stale gradients; ``set_lr``: {step: set_learning_rate before it};
#: ``batches``: each step's batch_size.
OPTIMIZER_CASES = {
    "sgd": dict(optimizer="sgd", params={"learning_rate": 0.05}),
    "sgd_momentum_wd_clip": dict(
        optimizer="SGD", params={"learning_rate": 0.05, "momentum": 0.9, "wd": 0.01,
                                 "clip_gradient": 0.5},
        mults={"b": (0.5, 0.0)}),
    "nag": dict(optimizer="nag", params={"learning_rate": 0.02, "momentum": 0.8, "wd": 0.01,
                                         "rescale_grad": 0.5, "clip_gradient": 0.3}),
    "nag_no_momentum_clip": dict(optimizer="NAG", params={"learning_rate": 0.05, "wd": 0.01,
                                                          "clip_gradient": 0.3}),
    "adam": dict(optimizer="adam", params={"learning_rate": 0.01, "wd": 0.01,
                                           "clip_gradient": 1.0, "beta1": 0.8}),
    "adam_stale": dict(optimizer="adam", params={"learning_rate": 0.01}, stale=True,
                       mults={"c": (2.0, 1.0)}),
    "rmsprop": dict(optimizer="rmsprop", params={"learning_rate": 0.01, "gamma1": 0.8,
                                                 "epsilon": 1e-6, "wd": 0.001}),
    "rmsprop_centered": dict(
        optimizer="RMSProp", params={"learning_rate": 0.01, "centered": True, "gamma1": 0.9,
                                     "gamma2": 0.8, "clip_weights": 0.6,
                                     "clip_gradient": 2.0}),
    "sgd_factor": dict(optimizer="sgd", params={"momentum": 0.5},
                       scheduler=("FactorScheduler", {"step": 2, "factor": 0.5,
                                                      "base_lr": 0.1})),
    "sgd_multifactor_warmup": dict(
        optimizer="sgd", params={"learning_rate": 0.1},
        scheduler=("MultiFactorScheduler", {"step": [2, 4], "factor": 0.3,
                                            "warmup_steps": 2, "warmup_begin_lr": 0.001})),
    "nag_poly_constant_warmup": dict(
        optimizer="nag", params={"momentum": 0.9},
        scheduler=("PolyScheduler", {"max_update": 5, "base_lr": 0.1, "pwr": 2,
                                     "final_lr": 0.01, "warmup_steps": 2,
                                     "warmup_begin_lr": 0.02, "warmup_mode": "constant"})),
    "rmsprop_cosine": dict(optimizer="rmsprop", params={},
                           scheduler=("CosineScheduler", {"max_update": 4, "base_lr": 0.1,
                                                          "final_lr": 0.02})),
    # MXNet's Adam passes its default learning_rate=0.001 on, which overrides the
    # scheduler's base_lr (MXNet prints a warning): recorded as MXNet does it.
    "adam_factor": dict(optimizer="adam", params={},
                        scheduler=("FactorScheduler", {"step": 3, "factor": 0.5,
                                                       "base_lr": 0.05})),
    "sgd_set_learning_rate": dict(optimizer="sgd", params={"learning_rate": 0.1,
                                                           "momentum": 0.3},
                                  set_lr={3: 0.02}, batches=[5, 2, 5, 3, 5, 5]),
}


def optimizer_inputs(rng):
    """The initial parameter values, ``x`` and ``y`` (float32)."""
    values = {name: rng.uniform(-0.5, 0.5, shape).astype(np.float32)
              for name, shape in SHAPES.items()}
    values["x"] = rng.uniform(-1, 1, X_SHAPE).astype(np.float32)
    values["y"] = rng.uniform(-1, 1, X_SHAPE).astype(np.float32)
    return values


def run_optimizer_case(case, inputs, autograd, gluon, nd, lr_scheduler, after_step=None):
    """Train ``w``, ``b``, ``c`` on ``((w * x + b + c * x + f - y) ** 2).sum()`` with
    ``gluon.Trainer`` as ``case`` says; returns each step's parameter values
    ``{name: (steps, *shape)}`` and each step's ``trainer.learning_rate``.
    ``after_step(step, trainer, params)`` runs after each step (the tests save and
    load the Trainer's states there)."""
    params = {}
    for name, shape in SHAPES.items():
        param = gluon.Parameter(name, shape=shape,
                                grad_req="null" if name == "f" else "write")
        param.initialize()
        param.set_data(nd.array(inputs[name]))
        params[name] = param
    for name, (lr_mult, wd_mult) in case.get("mults", {}).items():
        params[name].lr_mult = lr_mult
        params[name].wd_mult = wd_mult
    optimizer_params = dict(case["params"])
    if "scheduler" in case:
        cls, kwargs = case["scheduler"]
        optimizer_params["lr_scheduler"] = getattr(lr_scheduler, cls)(**kwargs)
    trainer = gluon.Trainer(params, case["optimizer"], optimizer_params)
    x, y = nd.array(inputs["x"]), nd.array(inputs["y"])
    stale = bool(case.get("stale"))
    history = {name: [] for name in SHAPES}
    rates = []
    for step, batch_size in enumerate(case.get("batches", [BATCH] * STEPS)):
        if step in case.get("set_lr", {}):
            trainer.set_learning_rate(case["set_lr"][step])
        with autograd.record():
            pred = params["w"].data() * x + params["b"].data() + params["f"].data()
            if not stale or step % 2 == 0:
                pred = pred + params["c"].data() * x
            loss = ((pred - y) ** 2).sum()
        loss.backward()
        trainer.step(batch_size, ignore_stale_grad=stale)
        for name, param in params.items():
            history[name].append(param.data().asnumpy())
        rates.append(trainer.learning_rate)
        if after_step is not None:
            trainer = after_step(step, trainer, params) or trainer
    return {name: np.stack(values) for name, values in history.items()}, rates


#: name -> (loss class, its arguments, the inputs: name -> shape, or a list of
#: values for a label).  ``pred`` and float labels are drawn uniform in [-1, 1]
#: (``scale`` times that for pred), probabilities in (0.02, 0.98).
LOSS_CASES = {
    "l1": ("L1Loss", {}, {"pred": (4, 5), "label": (4, 5)}),
    "l1_weight_sample_weight": ("L1Loss", {"weight": 0.5},
                                {"pred": (4, 5), "label": (4, 5), "sample_weight": (4, 1)}),
    "l1_batch_axis_1": ("L1Loss", {"batch_axis": 1}, {"pred": (3, 4, 2), "label": (3, 4, 2)}),
    "l2": ("L2Loss", {}, {"pred": (4, 3, 2, 2), "label": (4, 3, 2, 2)}),
    "l2_weight_sample_weight_reshaped_label": (
        "L2Loss", {"weight": 2.0},
        {"pred": (4, 6), "label": (4, 2, 3), "sample_weight": (4, 1)}),
    "l2_1d": ("L2Loss", {}, {"pred": (5,), "label": (5,)}),
    "l2_batch_axis_2": ("L2Loss", {"batch_axis": 2}, {"pred": (2, 3, 4), "label": (2, 3, 4)}),
    "bce": ("SigmoidBinaryCrossEntropyLoss", {},
            {"pred": (4, 5), "label": "binary", "scale": 4.0}),
    "bce_large_logits": ("SigmoidBinaryCrossEntropyLoss", {},
                         {"pred": (4, 5), "label": "probability", "scale": 40.0}),
    "bce_pos_weight": ("SigmoidBinaryCrossEntropyLoss", {},
                       {"pred": (4, 5), "label": "binary", "scale": 4.0,
                        "pos_weight": (1, 5)}),
    "bce_from_sigmoid": ("SigmoidBinaryCrossEntropyLoss", {"from_sigmoid": True},
                         {"pred": "probability", "label": "binary", "shape": (4, 5)}),
    "bce_from_sigmoid_pos_weight_weight": (
        "SigmoidBinaryCrossEntropyLoss", {"from_sigmoid": True, "weight": 0.7},
        {"pred": "probability", "label": "probability", "shape": (4, 5),
         "sample_weight": (4, 1), "pos_weight": (1, 5)}),
    "bce_alias_batch_axis_1": ("SigmoidBCELoss", {"batch_axis": 1},
                               {"pred": (3, 4), "label": "binary", "scale": 2.0}),
    "softmax_ce": ("SoftmaxCrossEntropyLoss", {},
                   {"pred": (4, 6), "label": [0, 5, 2, 3], "scale": 3.0}),
    "softmax_ce_axis_1": ("SoftmaxCrossEntropyLoss", {"axis": 1},
                          {"pred": (2, 5, 3, 3), "label": "classes", "scale": 3.0}),
    "softmax_ce_dense_label": ("SoftmaxCrossEntropyLoss", {"sparse_label": False},
                               {"pred": (4, 6), "label": "distribution", "scale": 3.0}),
    "softmax_ce_from_logits_weight_sample_weight": (
        "SoftmaxCrossEntropyLoss", {"from_logits": True, "weight": 1.5},
        {"pred": "log_softmax", "shape": (4, 6), "label": [1, 1, 4, 0],
         "sample_weight": (4, 1)}),
    "softmax_ce_labels_clipped_and_truncated": (
        "SoftmaxCELoss", {}, {"pred": (5, 4), "label": [-1, 7, 2.6, 3.9, 0.2], "scale": 2.0}),
    "softmax_ce_label_column": ("SoftmaxCELoss", {},
                                {"pred": (4, 3), "label": [[2], [0], [1], [1]]}),
    "softmax_ce_classes_first_batch_axis_1": (
        "SoftmaxCrossEntropyLoss", {"axis": 0, "batch_axis": 1},
        {"pred": (6, 4), "label": [5, 0, 3, 3], "scale": 3.0}),
}


def loss_inputs(spec, rng):
    """The float32 arrays of a case: pred, label, and sample_weight / pos_weight
    when it has them."""
    shape = spec.get("shape", spec["pred"])
    pred_kind = spec["pred"]
    if pred_kind == "probability":
        pred = rng.uniform(0.02, 0.98, shape)
    elif pred_kind == "log_softmax":
        logits = rng.uniform(-3, 3, shape)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        pred = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    else:
        pred = spec.get("scale", 1.0) * rng.uniform(-1, 1, shape)
    label = spec["label"]
    if label == "binary":
        label = (rng.uniform(0, 1, shape) > 0.5).astype(np.float64)
    elif label == "probability":
        label = rng.uniform(0.02, 0.98, shape)
    elif label == "classes":  # axis 1 removed
        label = rng.randint(0, shape[1], (shape[0],) + tuple(shape[2:])).astype(np.float64)
    elif label == "distribution":
        raw = rng.uniform(0, 1, shape)
        label = raw / raw.sum(axis=-1, keepdims=True)
    elif isinstance(label, tuple):
        label = rng.uniform(-1, 1, label)
    arrays = {"pred": pred, "label": np.asarray(label, dtype=np.float64)}
    for name in ("sample_weight", "pos_weight"):
        if name in spec:
            arrays[name] = rng.uniform(0.2, 2.0, spec[name])
    return {name: values.astype(np.float32) for name, values in arrays.items()}


def run_loss_case(case, arrays, autograd, gluon, nd, head=None):
    """The loss of ``arrays`` and the gradients of pred and label for the head
    gradient ``head`` (None: ones): ``(loss, pred_grad, label_grad)``."""
    cls, kwargs, spec = case
    loss_fn = getattr(gluon.loss, cls)(**kwargs)
    pred, label = nd.array(arrays["pred"]), nd.array(arrays["label"])
    pred.attach_grad()
    label.attach_grad()
    extra = [nd.array(arrays[name]) if name in arrays else None
             for name in ("sample_weight", "pos_weight")]
    while extra and extra[-1] is None:
        extra.pop()
    with autograd.record():
        loss = loss_fn(pred, label, *extra)
    loss.backward(None if head is None else nd.array(head))
    return loss.asnumpy(), pred.grad.asnumpy(), label.grad.asnumpy()

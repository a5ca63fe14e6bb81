"""Planted wrong plans for the kernel-check and planner tests: a real plan
whose result gets the bias added once more, as oneDNN 3.2's brgconv_strided
does on some layers."""


class WrongPlan:
    """A real plan whose result gets the bias added once more."""

    def __init__(self, plan):
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._plan, name)

    def run_plain(self, src, weights, bias, dst_init=None):
        out = self._plan.run_plain(src, weights, bias, dst_init)
        return out + bias.reshape((1, -1) + (1,) * (out.ndim - 2))


class WrongCandidate:
    """A candidate that builds a WrongPlan around ``real``'s plan."""

    def __init__(self, real):
        self._real = real
        self.index, self.family, self.weights, self.bias_fused = -1, "any", "any", True
        self.impl, self.is_reference = "planted:wrong_bias", False

    def build(self):
        return WrongPlan(self._real.build())

    def __repr__(self):
        return f"Candidate({self.impl})"

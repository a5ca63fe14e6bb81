"""NDArray basics a port from MXNet needs: contexts."""
import pytest

import mxdeconv
from mxdeconv import MXNetError, nd
from mxdeconv.context import context_arg


def test_context_is_the_cpu():
    x = nd.ones((2,))
    assert x.context == mxdeconv.cpu() == x.ctx and repr(x.context) == "cpu(0)"
    assert context_arg("ctx", None) == mxdeconv.cpu()
    assert context_arg("ctx", [mxdeconv.cpu(), "cpu(0)"]) == mxdeconv.cpu()
    assert context_arg("ctx", "cpu") == mxdeconv.cpu()
    with pytest.raises(MXNetError, match=r"ctx=gpu\(0\): mxdeconv runs on the CPU only"):
        context_arg("ctx", mxdeconv.gpu(0))
    with pytest.raises(MXNetError, match="ctx must be a context such as 'cpu\\(0\\)', got 'tpu'"):
        context_arg("ctx", "tpu")
    with pytest.raises(TypeError, match="ctx must be a Context"):
        context_arg("ctx", 3)
    with pytest.raises(MXNetError, match="device_id must be an int >= 0, got -1"):
        mxdeconv.cpu(-1)
    with mxdeconv.cpu() as ctx:
        assert ctx == mxdeconv.current_context()

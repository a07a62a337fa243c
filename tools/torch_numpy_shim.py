"""torch_numpy_shim.py — the few torch calls llama.cpp's converter makes for the Qwen families, on numpy.

Purpose
    tools/make_gguf_model_fixtures.py runs llama.cpp's own converter code (conversion/qwen.py, base.py:
    `set_gguf_parameters`, `modify_tensors`, `prepare_tensors`) on sluice's golden checkpoints where
    neither torch nor transformers can be installed (this machine reaches Debian's and npm's registries
    only). `install()` puts a module named `torch` (this shim) and an empty `transformers` into
    sys.modules before the converter is imported.

What it implements
    An eager float tensor over a numpy array: dtypes (bfloat16 held widened to float32 — every bf16 value
    is exact in f32, and the converter's prepare_tensors converts bf16 to f32 before modify_tensors
    anyway), from_numpy / view(dtype) / to(dtype) / numpy(), shape / ndim / dim() / numel(), indexing,
    reshape / view, permute, transpose, squeeze / unsqueeze, contiguous, chunk, +, -, *, unary minus, the
    bitwise &, |, <<, >> (gpt_oss.py's MXFP4 nibble repack, on uint8), and torch.exp / stack / cat / concat /
    split / zeros. Only what the Qwen, GLM and gpt-oss classes' paths call; anything else raises
    AttributeError, so a converter change that needs more fails loudly instead of computing something
    else. Arithmetic is numpy's in float32: bitwise torch's for the permutations, splits, stacks and
    `+ 1` (one IEEE rounding), within an ulp of torch's for exp (checked with a tolerance).

Rejected alternative
    Re-implementing the converter's tensor logic in the fixture script: the point is to run llama.cpp's
    code, so a converter change shows up as a changed fixture.
"""
import sys
import types

import numpy as np


class dtype:  # noqa: N801 (torch's spelling)
    def __init__(self, name, np_dtype, itemsize):
        self.name, self.np_dtype, self.itemsize = name, np_dtype, itemsize

    def __repr__(self):
        return f"torch.{self.name}"


float64 = dtype("float64", np.float64, 8)
float32 = dtype("float32", np.float32, 4)
float16 = dtype("float16", np.float16, 2)
bfloat16 = dtype("bfloat16", np.float32, 2)  # held widened to f32 (exact)
int64 = dtype("int64", np.int64, 8)
int32 = dtype("int32", np.int32, 4)
int16 = dtype("int16", np.int16, 2)
int8 = dtype("int8", np.int8, 1)
uint8 = dtype("uint8", np.uint8, 1)
bool = dtype("bool", np.bool_, 1)  # noqa: A001 (torch.bool)
float8_e4m3fn = dtype("float8_e4m3fn", np.uint8, 1)
float8_e5m2 = dtype("float8_e5m2", np.uint8, 1)
long = int64
Size = tuple


def _dtype_of(np_dtype):
    for d in (float64, float32, float16, int64, int32, int16, int8, uint8, bool):
        if np.dtype(d.np_dtype) == np.dtype(np_dtype):
            return d
    raise TypeError(f"torch shim: no dtype for {np_dtype}")


class Tensor:
    def __init__(self, array, dt=None):
        self.a = np.asarray(array)
        self.dtype = dt if dt is not None else _dtype_of(self.a.dtype)

    # -- metadata
    @property
    def shape(self):
        return tuple(self.a.shape)

    @property
    def ndim(self):
        return self.a.ndim

    def dim(self):
        return self.a.ndim

    def numel(self):
        return int(self.a.size)

    # -- conversion
    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], dtype):
            d = args[0]
            raw = np.ascontiguousarray(self.a)
            if d is bfloat16:
                u16 = raw.view(np.uint16)
                return Tensor((u16.astype(np.uint32) << 16).view(np.float32), bfloat16)
            return Tensor(raw.view(d.np_dtype), d)
        return self.reshape(*args)

    def to(self, d=None, **kwargs):
        d = kwargs.get("dtype", d)
        if d is None or d is self.dtype:
            return self
        return Tensor(self.a.astype(d.np_dtype), d)

    def float(self):
        return self.to(float32)

    def numpy(self):
        if self.dtype is bfloat16:
            raise TypeError("torch shim: numpy() of a bfloat16 tensor (torch refuses it too)")
        return np.ascontiguousarray(self.a)

    # -- shape
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return Tensor(self.a.reshape(shape), self.dtype)

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return Tensor(np.transpose(self.a, dims), self.dtype)

    def transpose(self, d0, d1):
        return Tensor(np.swapaxes(self.a, d0, d1), self.dtype)

    swapaxes = transpose  # torch.Tensor.swapaxes (llama.py LlamaModel.permute)

    def squeeze(self, dim=None):
        if dim is None:
            return Tensor(np.squeeze(self.a), self.dtype)
        return Tensor(np.squeeze(self.a, axis=dim) if self.a.shape[dim] == 1 else self.a, self.dtype)

    def unsqueeze(self, dim):
        return Tensor(np.expand_dims(self.a, dim), self.dtype)

    def contiguous(self):
        return Tensor(np.ascontiguousarray(self.a), self.dtype)

    def __getitem__(self, index):
        return Tensor(self.a[index], self.dtype)

    # -- arithmetic (float32 as torch on an f32 tensor)
    def _other(self, o):
        return o.a if isinstance(o, Tensor) else np.asarray(o, dtype=self.a.dtype)

    def __add__(self, o):
        return Tensor(self.a + self._other(o), self.dtype)

    __radd__ = __add__

    def __sub__(self, o):
        return Tensor(self.a - self._other(o), self.dtype)

    def __mul__(self, o):
        return Tensor(self.a * self._other(o), self.dtype)

    __rmul__ = __mul__

    def __neg__(self):
        return Tensor(-self.a, self.dtype)

    # -- bitwise, on integer tensors (gpt_oss.py's MXFP4 nibble repack: uint8 wraps as in torch)
    def __and__(self, o):
        return Tensor(self.a & self._other(o), self.dtype)

    def __or__(self, o):
        return Tensor(self.a | self._other(o), self.dtype)

    def __lshift__(self, o):
        return Tensor(self.a << self._other(o), self.dtype)

    def __rshift__(self, o):
        return Tensor(self.a >> self._other(o), self.dtype)

    def chunk(self, n, dim=0):
        return tuple(Tensor(p, self.dtype) for p in np.array_split(self.a, n, axis=dim))


def from_numpy(a):
    return Tensor(a)


def exp(t):
    return Tensor(np.exp(t.a), t.dtype)


def stack(tensors, dim=0):
    return Tensor(np.stack([t.a for t in tensors], axis=dim), tensors[0].dtype)


def cat(tensors, dim=0):
    return Tensor(np.concatenate([t.a for t in tensors], axis=dim), tensors[0].dtype)


concat = cat


def zeros(*shape, dtype=None):
    d = dtype or float32
    return Tensor(np.zeros(shape, dtype=d.np_dtype), d)


def split(t, sizes, dim=0):
    if isinstance(sizes, int):
        sizes = [sizes] * (t.shape[dim] // sizes)
    cuts = np.cumsum(sizes)[:-1]
    return tuple(Tensor(p, t.dtype) for p in np.split(t.a, cuts, axis=dim))


class inference_mode:  # noqa: N801
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise RuntimeError("transformers is not installed (torch_numpy_shim)")


def install():
    """Registers this module as `torch`, and a `transformers` whose AutoConfig always fails: the converter
    imports it at the top of conversion/base.py, and ModelBase.load_hparams catches the failure and reads
    config.json as it is (its own fallback). With transformers, hparams would be AutoConfig's to_dict():
    config.json plus the config class's defaults, which only differ where config.json omits a field."""
    sys.modules["torch"] = sys.modules[__name__]
    tf = types.ModuleType("transformers")
    tf.AutoConfig = _AutoConfig
    sys.modules["transformers"] = tf

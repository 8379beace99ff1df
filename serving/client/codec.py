"""numpy <-> TensorProto, as `tf.make_tensor_proto` / `tf.make_ndarray`, without TensorFlow."""

import math

import numpy as np

from serving.client.protos import tensor_pb2, tensor_shape_pb2, types_pb2

_NUMPY_DTYPES = {
    types_pb2.DT_FLOAT: np.float32,
    types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_HALF: np.float16,
    types_pb2.DT_INT8: np.int8,
    types_pb2.DT_INT16: np.int16,
    types_pb2.DT_INT32: np.int32,
    types_pb2.DT_INT64: np.int64,
    types_pb2.DT_UINT8: np.uint8,
    types_pb2.DT_UINT16: np.uint16,
    types_pb2.DT_UINT32: np.uint32,
    types_pb2.DT_UINT64: np.uint64,
    types_pb2.DT_BOOL: np.bool_,
    types_pb2.DT_COMPLEX64: np.complex64,
    types_pb2.DT_COMPLEX128: np.complex128,
}
_PROTO_DTYPES = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}
# The repeated field holding a dtype's values when `tensor_content` is not used.
_VALUE_FIELDS = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_HALF: "half_val",  # float16 bit patterns
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_COMPLEX64: "scomplex_val",  # (real, imaginary) pairs
    types_pb2.DT_COMPLEX128: "dcomplex_val",
}


def _to_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_ | np.str_):
        return _to_bytes(value.item())
    raise TypeError(f"expected str or bytes in a string tensor, got {type(value).__name__}")


def make_tensor_proto(value) -> tensor_pb2.TensorProto:
    """A TensorProto of an array-like, as `tf.make_tensor_proto` makes it.

    Arrays (and anything with a `dtype`) keep their dtype; Python numbers and lists get TF's
    defaults: float32 for floats, int32 for ints (int64 when out of range). str/bytes (or
    object arrays of them) are DT_STRING, str encoded as UTF-8.
    """
    if isinstance(value, tensor_pb2.TensorProto):
        return value
    if hasattr(value, "dtype"):
        array = np.asarray(value)
    else:  # Python scalars and lists
        try:
            array = np.asarray(value)
        except UnicodeDecodeError:  # str and non-ASCII bytes together
            array = np.array(value, dtype=object)
        if array.dtype.kind in "SU":  # bytes as given (numpy's "S" drops trailing NULs)
            array = np.array(value, dtype=object)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype == np.int64 and (
            not array.size or (array.min() >= -(2**31) and array.max() < 2**31)
        ):
            array = array.astype(np.int32)
    proto = tensor_pb2.TensorProto(
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in array.shape]
        )
    )
    if array.dtype.kind in "OSU":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(_to_bytes(v) for v in array.reshape(-1))
        return proto
    dtype = _PROTO_DTYPES.get(array.dtype.newbyteorder("="))
    if dtype is None:
        raise TypeError(f"unsupported dtype for a TensorProto: {array.dtype}")
    proto.dtype = dtype
    proto.tensor_content = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
    return proto


def make_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """The numpy array of a TensorProto, as `tf.make_ndarray` (strings: object array of bytes)."""
    shape = [d.size for d in proto.tensor_shape.dim]
    count = math.prod(shape)
    if proto.dtype == types_pb2.DT_STRING:
        values = list(proto.string_val)
        if len(values) < count:  # TF repeats the last value (or b"") to fill the shape
            values += [values[-1] if values else b""] * (count - len(values))
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    if proto.dtype not in _NUMPY_DTYPES:
        name = types_pb2.DataType.Name(proto.dtype)
        raise TypeError(f"unsupported TensorProto dtype without TensorFlow: {name}")
    dtype = np.dtype(_NUMPY_DTYPES[proto.dtype])
    if proto.tensor_content:
        return (
            np.frombuffer(proto.tensor_content, dtype.newbyteorder("<"))
            .astype(dtype)
            .reshape(shape)
        )
    values = getattr(proto, _VALUE_FIELDS[proto.dtype])
    if proto.dtype == types_pb2.DT_HALF:
        values = np.asarray(values, np.uint16).view(np.float16)
    elif dtype.kind == "c":
        values = np.asarray(values, np.float32 if dtype == np.complex64 else np.float64).view(dtype)
    else:
        values = np.asarray(values, dtype)
    if values.size == count:
        return values.reshape(shape)
    if values.size == 0:
        return np.zeros(shape, dtype)
    if values.size > count:
        raise ValueError(f"TensorProto has {values.size} values for shape {shape}")
    return np.pad(values, (0, count - values.size), "edge").reshape(shape)

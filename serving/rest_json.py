"""TF Serving's REST JSON <-> tensors and protos, as its HTTP API (serving/rest.py) reads and
writes them: request `instances`/`inputs` as arrays of the signature's input dtypes (checked as
TF Serving's parser checks them), outputs as `predictions`/`outputs` (float32 at float32
precision, binary strings as `{"b64": ...}`), and `examples` (+ `context`) as tf.Examples.
A value that does not convert is a ServingError (INVALID_ARGUMENT, HTTP 400).
"""

import base64
import json

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2

from serving.servable import ServingError


def invalid_argument(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _is_b64(value) -> bool:
    return isinstance(value, dict) and list(value) == ["b64"]


def _to_bytes(value):
    if isinstance(value, list):
        return [_to_bytes(v) for v in value]
    if _is_b64(value):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError):
            raise invalid_argument(f"Invalid base64 value: {value['b64']!r}") from None
    if isinstance(value, str):
        return value.encode("utf-8")
    raise invalid_argument(f"Expected a string or {{'b64': ...}}, got {json.dumps(value)}")


# The JSON value types each kind of input takes, as TF Serving's parser checks them (RapidJSON's
# IsBool / IsInt64 / IsNumber): `true` is not a number and 7.5 not an integer.
_JSON_TYPES = {"bool": (bool,), "integer": (int,), "floating": (int, float)}
INT64 = np.iinfo(np.int64)


def json_to_array(name: str, value, dtype: tf.DType) -> np.ndarray:
    """A JSON value as an array of the signature input's dtype (TF Serving parses by signature)."""
    try:
        if dtype == tf.string:
            array = np.array(_to_bytes(value), dtype=object)
            if not all(isinstance(x, bytes) for x in array.flat):
                raise ValueError("ragged nested lists")
            return array
        return _numbers(name, value, dtype)
    except (ValueError, TypeError) as e:
        raise invalid_argument(
            f"Input {name!r}: cannot convert {str(value)[:100]} to {dtype.name}: {e}"
        ) from None


def _numbers(name: str, value, dtype: tf.DType) -> np.ndarray:
    """Numbers of a bool/integer/float input, each of a JSON type the dtype takes and, for
    integers, in its range (numpy alone would wrap 2**31 round in int32, truncate 7.5 to 7 and
    take `true` as 1)."""
    kind = "bool" if dtype.is_bool else "integer" if dtype.is_integer else "floating"
    values = np.array(value, dtype=object)  # nested lists of one shape; a ragged one: leaves
    for leaf in values.flat:
        # bool is an int subclass in Python, so the exact type is what counts.
        if type(leaf) not in _JSON_TYPES[kind]:
            raise invalid_argument(
                f"Input {name!r}: JSON value {json.dumps(leaf)[:100]} is not of expected "
                f"type: {dtype.name}"
            )
    if kind == "integer" and values.size:
        limits = np.iinfo(dtype.as_numpy_dtype)
        low, high = min(values.flat), max(values.flat)
        if low < limits.min or high > limits.max:
            out = low if low < limits.min else high
            raise invalid_argument(
                f"Input {name!r}: {out} is out of range for {dtype.name} "
                f"([{limits.min}, {limits.max}])"
            )
    return values.astype(dtype.as_numpy_dtype)


# --- float32 values at float32 precision in JSON ----------------------------------------------
#
# Python's json writes a float by its shortest float64 repr, so a float32 0.1 (as the float64
# 0.100000001490116...) comes out as 0.10000000149011612. TF Serving writes float32 tensors at
# float32 precision. So each float32 value becomes the float64 nearest its shortest float32
# round-trip decimal (whose repr is that decimal), vectorized: for each value, the fewest
# significant digits d (7 first, then fewer or more) whose rounding `rint(v * 10**s) / 10**s`
# (s = d - 1 - decimal exponent) parses back to the same float32.

_POWERS_OF_10 = 10.0 ** np.arange(23)  # exact in float64
# x86's 80-bit (or a 128-bit) long double: 10**s to 10**27 exact, 64-bit products and quotients.
_LONG_DOUBLE = np.finfo(np.longdouble).nmant >= 63
_LONG_POWERS_OF_10 = np.longdouble(10) ** np.arange(64).astype(np.longdouble)
_LONG_EPSILON = np.finfo(np.longdouble).eps


def _rounded(values, exponent, digits: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(`values` rounded to `digits` significant digits, None): |scale| <= 22, so the powers of
    ten are exact and each result is the double nearest its decimal (one correct rounding)."""
    scale = digits - 1 - exponent
    factor = _POWERS_OF_10[np.abs(scale)]
    if not scale.size or scale.min() >= 0:
        return np.rint(values * factor) / factor, None
    up = scale >= 0
    return np.where(up, np.rint(values * factor) / factor, np.rint(values / factor) * factor), None


def _rounded_long(values, exponent, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """As _rounded for any float32 (|scale| <= 53) in long double, with a `certain` mask: False
    where the decimal lies so near a midpoint between two doubles that long double's rounding
    might have picked the other one (rare: those go through numpy's per-value repr)."""
    scale = digits - 1 - exponent
    factor = _LONG_POWERS_OF_10[np.abs(scale)]
    long_values = values.astype(np.longdouble)
    up = scale >= 0
    count = np.rint(np.where(up, long_values * factor, long_values / factor))
    decimal = np.where(up, count / factor, count * factor)
    candidate = decimal.astype(np.float64)
    neighbour = np.nextafter(candidate, np.where(decimal > candidate, np.inf, -np.inf))
    half_gap = (np.abs(neighbour - candidate) / 2).astype(np.longdouble)
    off = np.abs(decimal - candidate.astype(np.longdouble))
    return candidate, np.abs(off - half_gap) > 8 * _LONG_EPSILON * np.abs(decimal)


def _shortest(values, exponent, rounder) -> tuple[np.ndarray, np.ndarray]:
    """(the shortest round-trip decimals of float32 `values` (float64), indices unresolved)."""
    target = values.astype(np.float32)
    result = values.copy()
    certain = np.ones(values.shape, bool)

    def attempt(index, digits):
        candidate, sure = rounder(values[index], exponent[index], digits)
        good = candidate.astype(np.float32) == target[index]
        result[index[good]] = candidate[good]
        if sure is not None:
            certain[index[good]] = sure[good]
        return good

    good = attempt(np.arange(values.size), 7)
    down = np.flatnonzero(good)  # 7 digits round-trip: fewer while they still do
    for digits in range(6, 0, -1):
        if not down.size:
            break
        down = down[attempt(down, digits)]
    up = np.flatnonzero(~good)  # 7 do not: 8, else 9 (which always do, up to rounding)
    for digits in (8, 9):
        if not up.size:
            break
        up = up[~attempt(up, digits)]
    return result, np.union1d(up, np.flatnonzero(~certain))


def float32_json_values(array) -> np.ndarray:
    """float32 values as the float64 values of their shortest float32 round-trip decimals.

    JSON then writes 0.1, not 0.10000000149011612 (see above). NaN, inf and 0 are kept.
    """
    x = np.asarray(array, np.float32)
    with np.errstate(all="ignore"):  # log10(0), NaN payloads, float32 overflow of candidates
        return _float32_json_values(x)


def _float32_json_values(x: np.ndarray) -> np.ndarray:
    flat = x.astype(np.float64).ravel()
    exponent = np.floor(np.log10(np.abs(flat)))
    finite = np.isfinite(exponent)  # False for 0, inf and NaN
    exact = finite & (exponent >= -14) & (exponent <= 22)  # |scale| <= 22 for 1 to 9 digits
    left = []
    for index, rounder in (
        (np.flatnonzero(exact), _rounded),
        (np.flatnonzero(finite & ~exact), _rounded_long if _LONG_DOUBLE else None),
    ):
        if not index.size:
            continue
        if rounder is None:
            left.append(index)
            continue
        values, unresolved = _shortest(flat[index], exponent[index].astype(np.int64), rounder)
        flat[index] = values
        left.append(index[unresolved])
    for i in np.concatenate(left) if left else ():
        flat[i] = float(str(np.float32(flat[i])))  # numpy's str: the shortest float32 repr
    return flat.reshape(x.shape)


def array_to_json(name: str, array: np.ndarray):
    """An output array as JSON; strings decode as UTF-8 unless binary (or the alias ends `_bytes`).

    float32 values are written at float32 precision (see float32_json_values), others as is."""
    if array.dtype == np.float32:
        return float32_json_values(array).tolist()
    if array.dtype != object:
        return array.tolist()

    def convert(value):
        if isinstance(value, list):
            return [convert(v) for v in value]
        if not name.endswith("_bytes"):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}

    return convert(array.tolist())


def _feature(value) -> tf.train.Feature:
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, bool | int) for v in values):
        for v in values:
            if not INT64.min <= v <= INT64.max:
                raise invalid_argument(f"Example feature value {v} is out of range for int64")
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if all(isinstance(v, bool | int | float) for v in values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[_to_bytes(v) for v in values]))


def json_to_example(features) -> tf.train.Example:
    if not isinstance(features, dict):
        raise invalid_argument(
            f"Each example must be a JSON object, got {json.dumps(features)[:100]}"
        )
    return tf.train.Example(
        features=tf.train.Features(feature={k: _feature(v) for k, v in features.items()})
    )


def json_to_inputs(request, specs) -> tuple[dict, bool]:
    """(input name -> array, whether the request was in the row format (`instances`)) of a
    predict request, for the signature inputs `specs` (name -> TensorSpec)."""
    if ("instances" in request) == ("inputs" in request):
        raise invalid_argument(
            "JSON Value: request must have exactly one of 'instances' or 'inputs'"
        )
    single = next(iter(specs)) if len(specs) == 1 else None
    if "inputs" in request:
        value = request["inputs"]
        named = isinstance(value, dict) and not _is_b64(value)
        if not named and single is None:
            raise invalid_argument(f"'inputs' must be an object with keys {sorted(specs)}")
        columns = value if named else {single: value}
        row_format = False
    else:
        instances = request["instances"]
        if not isinstance(instances, list) or not instances:
            raise invalid_argument("'instances' must be a non-empty list")
        named = isinstance(instances[0], dict) and not _is_b64(instances[0])
        if not named and single is None:
            raise invalid_argument(f"Each instance must be an object with keys {sorted(specs)}")
        if named and any(
            not isinstance(i, dict) or i.keys() != instances[0].keys() for i in instances
        ):
            raise invalid_argument("All instances must be objects with the same keys")
        columns = (
            {k: [i[k] for i in instances] for k in instances[0]} if named else {single: instances}
        )
        row_format = True
    unknown = sorted(set(columns) - set(specs))
    if unknown:
        raise invalid_argument(
            f"input tensor alias not found in signature: {unknown[0]}. "
            f"Inputs expected to be in the set {{{','.join(sorted(specs))}}}."
        )
    return {k: json_to_array(k, v, specs[k].dtype) for k, v in columns.items()}, row_format


def outputs_to_json(outputs: dict, row_format: bool):
    """A predict response: `predictions` (row format) or `outputs` (columnar)."""
    if not row_format:
        converted = {k: array_to_json(k, v) for k, v in outputs.items()}
        if len(converted) == 1:
            return {"outputs": next(iter(converted.values()))}
        return {"outputs": converted}
    sizes = {v.shape[0] if v.ndim else None for v in outputs.values()}
    if len(sizes) != 1 or None in sizes:
        raise invalid_argument(
            "Output tensors have different (or no) batch dimensions; "
            "use the columnar 'inputs' format for this signature"
        )
    if len(outputs) == 1:
        ((name, value),) = outputs.items()
        return {"predictions": array_to_json(name, value)}
    columns = {k: array_to_json(k, v) for k, v in outputs.items()}
    return {"predictions": [{k: c[i] for k, c in columns.items()} for i in range(sizes.pop())]}


def json_to_input(request):
    """The `Input` proto (examples, with their context if given) of a classify/regress
    request."""
    examples = request.get("examples")
    if not isinstance(examples, list) or not examples:
        raise invalid_argument("'examples' must be a non-empty list of objects")
    input_pb = classification_pb2.ClassificationRequest().input
    if "context" in request:
        target = input_pb.example_list_with_context
        target.context.CopyFrom(json_to_example(request["context"]))
    else:
        target = input_pb.example_list
    target.examples.extend(json_to_example(e) for e in examples)
    return input_pb

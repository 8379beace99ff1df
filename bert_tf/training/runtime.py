"""What a training process sets up before it builds a model: the `tf.distribute` strategy, the
Keras precision policy and the seeds."""

from __future__ import annotations

import keras
import tensorflow as tf
from absl import logging
from google.auth.exceptions import GoogleAuthError
from googleapiclient.errors import Error as GoogleApiError

# The flags these read are defined without TensorFlow (bert_tf.options, flags_util).
from bert_tf.flags_util import TPU_ONLY_FLAGS, strategy_name
from bert_tf.options import STRATEGIES, PrecisionOptions

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")

# What TPUClusterResolver raises when Google's APIs refuse (no credentials, no such TPU).
_GOOGLE_API_ERRORS = (GoogleAuthError, GoogleApiError)


def get_strategy(
    name: str,
    tpu: str | None = None,
    *,
    zone: str | None = None,
    project: str | None = None,
) -> tf.distribute.Strategy:
    """The `tf.distribute` strategy for a `--distribution_strategy` value (see `STRATEGIES`).

    `one_device` uses the first GPU if any, else the CPU; `tpu` resolves `tpu` (a name or
    grpc:// address; "" or None = the local TPU; a Cloud TPU name in GCE `zone` of GCP
    `project`, both detected from the GCE metadata if None) and initialises the TPU system.
    Scripts go through `strategy_from_flags`.
    """
    if name == "one_device":
        device = "/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        try:  # the cluster comes from TF_CONFIG (one local worker without it)
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as e:
            raise RuntimeError(
                f"multi_worker_mirrored: create the strategy before any TensorFlow op ({e})"
            ) from None
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu or "", zone=zone, project=project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"--distribution_strategy: expected one of {STRATEGIES}, got {name!r}")


def strategy_from_flags(args) -> tf.distribute.Strategy:
    """The `tf.distribute.Strategy` that the flags of `options.DistributionOptions` and
    `options.TpuOptions` select (`flags_util.strategy_name`).

    On a TPU: `TPUClusterResolver(tpu=--tpu_name or --master, zone=--tpu_zone,
    project=--gcp_project)`. Call it before any TensorFlow op (multi_worker_mirrored
    configures collective ops at startup).
    """
    name = strategy_name(args)
    if name != "tpu":
        given = [f"--{n}" for n in TPU_ONLY_FLAGS if args[n].value]
        if given:
            logging.warning("%s ignored: not running on a TPU (see --use_tpu)", ", ".join(given))
        return get_strategy(name)
    tpu = args.tpu_name or args.master
    try:
        strategy = get_strategy("tpu", tpu, zone=args.tpu_zone, project=args.gcp_project)
    except (OSError, ValueError, RuntimeError, tf.errors.OpError, *_GOOGLE_API_ERRORS) as e:
        raise ValueError(_tpu_error(args, e)) from None
    if args.tpu_job_name:
        logging.info(
            "--tpu_job_name=%s ignored: TF 2 names the TPU's job itself", args.tpu_job_name
        )
    cores = strategy.num_replicas_in_sync
    if args["num_tpu_cores"].present and cores != args.num_tpu_cores:
        logging.warning(
            "--num_tpu_cores=%d but the TPU has %d cores: training uses all %d",
            args.num_tpu_cores,
            cores,
            cores,
        )
    return strategy


def _tpu_error(args, error: Exception) -> str:
    """One line: the TPU flags given, what TPUClusterResolver tried with them, and why it failed
    (off Google Cloud the bare error is only "<urlopen error [Errno -2] Name or service not
    known>", from the GCE metadata server it asked)."""
    given = ["--use_tpu"] if args["use_tpu"].present else []
    if args["distribution_strategy"].present:
        given.append(f"--distribution_strategy={args.distribution_strategy}")
    given += [f"--{name}={args[name].value}" for name in TPU_ONLY_FLAGS if args[name].value]
    tpu = args.tpu_name or args.master
    if not tpu:
        tried = "looking for a TPU attached to this machine (no --tpu_name or --master)"
    elif tpu.startswith("grpc://"):
        tried = f"connecting to the TPU at {tpu}"
    elif args.tpu_zone and args.gcp_project:
        tried = (
            f"looking up Cloud TPU {tpu!r} in zone {args.tpu_zone} of project "
            f"{args.gcp_project} through the Cloud TPU API"
        )
    else:
        tried = (
            f"looking up Cloud TPU {tpu!r}, its zone and project from the GCE metadata server "
            "(only on Google Cloud: elsewhere give --tpu_zone and --gcp_project, or "
            "--tpu_name=grpc://<address>:8470)"
        )
    detail = " ".join(str(error).split()) or type(error).__name__
    return f"{' '.join(given)}: TPUClusterResolver failed {tried}: {detail}"


def set_precision(policy: str) -> None:
    """Sets the Keras global dtype policy; call before building the model."""
    if policy not in PRECISIONS:
        raise ValueError(f"precision policy: expected one of {PRECISIONS}, got {policy!r}")
    keras.mixed_precision.set_global_policy(policy)


def set_seed(seed: int) -> None:
    """Seeds Python, NumPy, TensorFlow and Keras, and makes TF ops deterministic."""
    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


def seed_and_precision(seed: int | None, precision: PrecisionOptions) -> None:
    """What every training script and the pipelines' Trainer set after choosing the strategy
    and before building the model: the seed (None: unseeded) and the precision policy."""
    if seed is not None:
        set_seed(seed)
    set_precision(precision.policy)

"""What `python -m tfx_pipeline.run` runs (`tfx_pipeline/run.py` is its thin absl main).

- `run_flags`: its flags (the option flags from `configs.option_specs()`) and what the other
  modules read from them;
- `checks`: every flag check that needs no TensorFlow or TFX import;
- `build`: the pipeline the flags describe;
- `local`: `--runner=local` / `beam`, the run with its log file, progress and summary;
- `kubeflow`: `--runner=kubeflow` / `vertex`, the KFP v2 PipelineSpec / Vertex PipelineJob.
"""

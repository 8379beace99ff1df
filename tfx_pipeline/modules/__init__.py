"""Transform's `preprocessing_fn` and Trainer's `run_fn` of each pipeline, named by import path
(`tfx_pipeline.configs`). A regular package, so that the installed wheel (the image) has it."""

"""serving: SavedModel export for TF Serving, a compatible local model server, and a client."""

import os as _os

# Quiet TensorFlow's C++ import-time log noise (INFO/WARNING); errors still show. Set before any
# TensorFlow import so scripts run as `python -m <package>.<script>` get it too.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

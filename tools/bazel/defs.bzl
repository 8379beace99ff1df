"""Macros that keep BUILD files short while modules and tests are still being added."""

_PYTEST_MAIN = "//tools/bazel:pytest_main.py"

def absl_binaries(scripts):
    """One py_binary per absl script that exists; planned scripts are listed before they land.

    Args:
      scripts: dict of target name -> (script path in this package, library label). A script
        whose file does not exist (yet) gets no target, so the build stays green meanwhile.
    """
    for name, (script, library) in scripts.items():
        if native.glob([script]):
            native.py_binary(
                name = name,
                srcs = [script],
                main = script,
                deps = [library],
                visibility = ["//visibility:public"],
            )

def pytest_tests(
        name,
        deps_by_dir,
        config,
        sizes = {},
        timeouts = {},
        fast = [],
        deps = [],
        data = []):
    """One py_test per `**/test_*.py` in this package, each running pytest on its file.

    Target name: the file's path without `.py` (tests/data/test_fetch.py: //tests:data/test_fetch).
    A `test_suite` called `name` groups them all.

    Args:
      name: name of the test_suite.
      deps_by_dir: dict of first subdirectory ("" for files at the top) -> the libraries its
        tests import. A test in a subdirectory missing here fails the build with a clear message.
      config: label of the pytest configuration file (pyproject.toml), passed with `-c`.
      sizes: dict of test file or first subdirectory -> Bazel size ("large" for slow end-to-end
        tests, which Bazel schedules with more memory); the default is "medium".
      timeouts: dict of test file or first subdirectory -> Bazel timeout for the whole file. The
        default is "long" (900 s, pyproject's per-test pytest-timeout): TensorFlow's import alone
        takes 10-30 s on a busy 2-core machine, and Bazel should not kill what pytest would let
        finish. A file of several end-to-end pipeline runs needs "eternal" (3600 s).
      fast: test files tagged "fast": quick files (under ~30 s each) that together touch every
        library, which CI runs as Bazel targets (`--test_tag_filters=fast`) after `make test`
        has run everything.
      deps: support libraries every test needs (the top-level conftest.py).
      data: non-Python files every test may read.
    """
    for src in fast:
        if not native.glob([src]):
            fail("%s/BUILD: fast lists %s, which does not exist" % (native.package_name(), src))
    tests = []
    for src in native.glob(["**/test_*.py"]):
        subdir = src.rpartition("/")[0].partition("/")[0]
        if subdir not in deps_by_dir:
            fail("%s/%s: add an entry for %r to deps_by_dir in %s/BUILD, naming the libraries " %
                 (native.package_name(), src, subdir, native.package_name()) +
                 "its tests import")
        target = src[:-len(".py")]

        # The subdirectory's own conftest.py and helpers, which import what that directory tests.
        helpers = native.glob([subdir + "/**/*.py"], exclude = ["**/test_*.py"]) if subdir else []
        native.py_test(
            name = target,
            srcs = [_PYTEST_MAIN, src] + helpers,
            main = _PYTEST_MAIN,
            args = ["$(rootpath :%s)" % src, "$(rootpath %s)" % config],
            data = [config] + data,
            deps = deps + deps_by_dir[subdir],
            size = sizes.get(src, sizes.get(subdir, "medium")),
            timeout = timeouts.get(src, timeouts.get(subdir, "long")),
            # "local": the tests share the data cache ($BERT_TFX_CACHE or ~/.cache/bert_tfx) and
            # fill it with pip when a file is missing, which the sandbox (read-only outside the
            # execroot) would not allow. "requires-network": pip reaches the package registry.
            tags = ["local", "requires-network"] + (["fast"] if src in fast else []),
        )
        tests.append(":" + target)
    native.test_suite(name = name, tests = tests)

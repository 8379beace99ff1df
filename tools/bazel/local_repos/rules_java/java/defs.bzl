"""Stand-in for @rules_java//java:defs.bzl: forwards to Bazel 4.2.3's native Java rules.

@bazel_tools BUILD files (e.g. tools/jdk) load these names; our project builds no Java itself.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain

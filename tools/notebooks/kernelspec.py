"""The Jupyter kernel every course notebook names: defined once, for tools/ and the tests.

The shell scripts that register it (``course``, ``postBuild``) repeat the two strings;
tests/tools/test_lab_command.py checks that they agree with this file.
"""
NAME = "hooklab"
DISPLAY_NAME = "Python 3 (hooklab)"
KERNELSPEC = {"name": NAME, "display_name": DISPLAY_NAME, "language": "python"}

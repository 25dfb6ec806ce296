"""The benchmark command and its parts (bench/README.md); not tests, not under pytest."""

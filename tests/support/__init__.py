"""What tests share beyond fixtures, and bench/ imports from here: the environment of real processes
(tests.support.env) and progress lines. Nothing here is a test; nothing here imports bench/."""

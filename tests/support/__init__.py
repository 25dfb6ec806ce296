"""What tests share beyond fixtures, and bench/ imports from here: the environment of real processes
(tests.support.env), progress lines, and the chaos and failover engines (tests.support.chaos). Nothing here
is a test; nothing here imports bench/."""

"""oneDNN: the binding (``_ops``, the only code that calls oneDNN), the
planner that chooses and tunes plans, the plan cache on disk and the kernel
check.  It speaks buffers and descriptors, never NDArray.
"""
